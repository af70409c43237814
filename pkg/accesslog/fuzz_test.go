package accesslog

import (
	"context"
	"io"
	"testing"

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
// server: no panic, and it releases exactly the tokens carried by
// DownstreamEnd entries, each once per entry, and nothing else.
func FuzzAccessLog(f *testing.F) {
	const known = "AAAAAAAAAAAAAAAAAAAAAA"
	for _, m := range []*alsv3.StreamAccessLogsMessage{
		httpLogs(ident("n1"), endOf(known), endOf(known)),
		httpLogs(nil, entry(tokenMeta(known), datav3.AccessLogType_DownstreamPeriodic, 0, nil), endOf("x")),
		httpLogs(nil, entry(nil, datav3.AccessLogType_DownstreamEnd, 503, &datav3.ResponseFlags{UpstreamRemoteReset: true})),
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
			tok := cp.GetMetadata().GetFilterMetadata()[Namespace].GetFields()[TokenKey].GetStringValue()
			if cp.GetAccessLogType() == datav3.AccessLogType_DownstreamEnd && tok != "" {
				want = append(want, tok)
			}
		}
		l := &recordingLedger{known: known}
		rec := newFakeRecorder()
		s := New(l, rec, nil)
		if err := s.StreamAccessLogs(&fakeStream{msgs: []*alsv3.StreamAccessLogsMessage{&msg, &msg}}); err != nil {
			t.Fatalf("StreamAccessLogs: %v", err)
		}
		want = append(want, want...) // the message was sent twice
		if len(l.released) != len(want) {
			t.Fatalf("released %q, want %q", l.released, want)
		}
		for i := range want {
			if l.released[i] != want[i] {
				t.Fatalf("released %q, want %q", l.released, want)
			}
		}
		if rec.streams.Load() != 0 {
			t.Fatalf("open streams = %d after the stream ended", rec.streams.Load())
		}
		total := 0
		for _, n := range rec.entries {
			total += n
		}
		if n := 2 * (len(msg.GetHttpLogs().GetLogEntry()) + len(msg.GetTcpLogs().GetLogEntry())); total != n {
			t.Fatalf("counted %d entries, want %d (%v)", total, n, rec.entries)
		}
	})
}
