package accesslog

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// recordingLedger records every Release; one token is known.
type recordingLedger struct {
	known    string
	released []string
}

func (l *recordingLedger) Release(token string, _ permit.Source) (permit.Lease, permit.Result) {
	l.released = append(l.released, token)
	if token == l.known {
		l.known = ""
		return permit.Lease{Token: token, Bulkhead: "catalog"}, permit.Released
	}
	return permit.Lease{}, permit.Unknown
}

func (l *recordingLedger) Renew(token string, _ time.Duration) (permit.Lease, permit.Result) {
	if token == l.known {
		return permit.Lease{Token: token, Bulkhead: "catalog"}, permit.Renewed
	}
	return permit.Lease{}, permit.Unknown
}

func (l *recordingLedger) Adopt(p permit.Releaser, token string, _ permit.Grant) (permit.Lease, error) {
	return permit.Lease{}, permit.ErrInvalidToken
}

// fakeStream delivers msgs then io.EOF.
type fakeStream struct {
	grpc.ServerStream
	msgs []*alsv3.StreamAccessLogsMessage
}

func (s *fakeStream) Recv() (*alsv3.StreamAccessLogsMessage, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

func (s *fakeStream) SendAndClose(*alsv3.StreamAccessLogsResponse) error { return nil }
func (s *fakeStream) Context() context.Context                           { return context.Background() }

// FuzzAccessLog feeds random StreamAccessLogsMessage encodings to the
// server, decoded (StreamAccessLogs) and read from the wire (as Register
// serves them): no panic, and it releases exactly the tokens carried by
// DownstreamEnd entries, each once per entry, and nothing else.
func FuzzAccessLog(f *testing.F) {
	const known = "AAAAAAAAAAAAAAAAAAAAAA"
	for _, m := range []*alsv3.StreamAccessLogsMessage{
		httpLogs(ident("n1"), endOf(known), endOf(known)),
		httpLogs(nil, httpEntry(tokenMeta(known), datav3.AccessLogType_DownstreamPeriodic, 0, nil), endOf("x")),
		httpLogs(nil, httpEntry(nil, datav3.AccessLogType_DownstreamEnd, 503, &datav3.ResponseFlags{UpstreamRemoteReset: true})),
		{LogEntries: &alsv3.StreamAccessLogsMessage_TcpLogs{TcpLogs: &alsv3.StreamAccessLogsMessage_TCPAccessLogEntries{
			LogEntry: []*datav3.TCPAccessLogEntry{{}}}}},
		{},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var msg alsv3.StreamAccessLogsMessage
		if err := proto.Unmarshal(data, &msg); err != nil {
			t.Skip()
		}
		var want []string
		for _, e := range msg.GetHttpLogs().GetLogEntry() {
			cp := e.GetCommonProperties()
			tok := cp.GetMetadata().GetFilterMetadata()[permit.MetadataNamespace].GetFields()[permit.MetadataToken].GetStringValue()
			if cp.GetAccessLogType() == datav3.AccessLogType_DownstreamEnd && tok != "" {
				want = append(want, tok)
			}
		}
		want = append(want, want...) // the message is sent twice
		for _, path := range []string{"decoded", "wire"} {
			l := &recordingLedger{known: known}
			rec := newFakeRecorder()
			s := New(l, rec, nil)
			var err error
			if path == "decoded" {
				err = s.StreamAccessLogs(&fakeStream{msgs: []*alsv3.StreamAccessLogsMessage{&msg, &msg}})
			} else {
				sent := 0
				err = s.serve(func(m *message) error {
					if sent == 2 {
						return io.EOF
					}
					sent++
					return m.UnmarshalWire(data)
				}, func() error { return nil })
			}
			if err != nil {
				t.Fatalf("%s: serve: %v", path, err)
			}
			if !slices.Equal(l.released, want) {
				t.Fatalf("%s: released %q, want %q", path, l.released, want)
			}
			if rec.streams.Load() != 0 {
				t.Fatalf("%s: open streams = %d after the stream ended", path, rec.streams.Load())
			}
			total := 0
			for _, n := range rec.entries {
				total += n
			}
			if n := 2 * (len(msg.GetHttpLogs().GetLogEntry()) + len(msg.GetTcpLogs().GetLogEntry())); total != n {
				t.Fatalf("%s: counted %d entries, want %d (%v)", path, total, n, rec.entries)
			}
		}
	})
}
