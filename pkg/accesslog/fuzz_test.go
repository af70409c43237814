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

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// recordingLedger records every Release, Renew and Adopt; one token is
// known. It refuses adoptions.
type recordingLedger struct {
	known                      string
	released, renewed, adopted []string
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
	l.renewed = append(l.renewed, token)
	if token == l.known {
		return permit.Lease{Token: token, Bulkhead: "catalog"}, permit.Renewed
	}
	return permit.Lease{}, permit.Unknown
}

func (l *recordingLedger) Adopt(_ permit.Releaser, token string, _ permit.Grant) (permit.Lease, error) {
	l.adopted = append(l.adopted, token)
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
// server, with heartbeat leases, decoded (StreamAccessLogs) and read from
// the wire (as Register serves them): no panic; it releases exactly the
// tokens carried by DownstreamEnd (TcpConnectionEnd) entries and renews
// exactly those of DownstreamPeriodic (TcpPeriodic) entries, each once per entry; it tries to adopt only
// renewed tokens that name the bulkhead, and a refused adoption leaves no
// permit taken.
func FuzzAccessLog(f *testing.F) {
	const known = "AAAAAAAAAAAAAAAAAAAAAA"
	for _, m := range []*alsv3.StreamAccessLogsMessage{
		httpLogs(ident("n1"), endOf(known), endOf(known)),
		httpLogs(nil, httpEntry(tokenMeta(known), datav3.AccessLogType_DownstreamPeriodic, 0, nil), endOf("x")),
		// a running request this ledger does not know: adopted (refused here)
		httpLogs(ident("n2"), httpEntry(tokenMeta("BBBBBBBBBBBBBBBBBBBBBA"), datav3.AccessLogType_DownstreamPeriodic, 0, nil)),
		httpLogs(nil, httpEntry(nil, datav3.AccessLogType_DownstreamEnd, 503, &datav3.ResponseFlags{UpstreamRemoteReset: true})),
		{LogEntries: &alsv3.StreamAccessLogsMessage_TcpLogs{TcpLogs: &alsv3.StreamAccessLogsMessage_TCPAccessLogEntries{
			LogEntry: []*datav3.TCPAccessLogEntry{{}}}}},
		// connections: a periodic of a known permit, an end, a periodic of an unknown one, the HTTP namespace
		tcpMsg(ident("n3"), tcpEntryOf(known, datav3.AccessLogType_TcpPeriodic, nil),
			tcpEntryOf("x", datav3.AccessLogType_TcpConnectionEnd, nil), tcpEntryOf("BBBBBBBBBBBBBBBBBBBBBA", datav3.AccessLogType_TcpPeriodic, nil),
			&datav3.TCPAccessLogEntry{CommonProperties: &datav3.AccessLogCommon{Metadata: tokenMeta(known),
				AccessLogType: datav3.AccessLogType_TcpConnectionEnd}}),
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
		var want, wantRenewed []string
		expect := func(cp *datav3.AccessLogCommon, ns string, end, periodic datav3.AccessLogType) {
			tok := cp.GetMetadata().GetFilterMetadata()[ns].GetFields()[permit.MetadataToken].GetStringValue()
			switch {
			case tok == "":
			case cp.GetAccessLogType() == end:
				want = append(want, tok)
			case cp.GetAccessLogType() == periodic:
				wantRenewed = append(wantRenewed, tok)
			}
		}
		for _, e := range msg.GetHttpLogs().GetLogEntry() {
			expect(e.GetCommonProperties(), permit.MetadataNamespace, datav3.AccessLogType_DownstreamEnd, datav3.AccessLogType_DownstreamPeriodic)
		}
		for _, e := range msg.GetTcpLogs().GetLogEntry() {
			expect(e.GetCommonProperties(), permit.MetadataNamespaceNetwork, datav3.AccessLogType_TcpConnectionEnd, datav3.AccessLogType_TcpPeriodic)
		}
		want = append(want, want...) // the message is sent twice
		wantRenewed = append(wantRenewed, wantRenewed...)
		reg := bulkhead.NewRegistry()
		if _, err := reg.Apply(map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 1}}); err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"decoded", "wire"} {
			l := &recordingLedger{known: known}
			rec := newFakeRecorder()
			s := New(l, rec, nil, WithHeartbeat(Heartbeat{Interval: time.Second, TTL: 3 * time.Second}, reg))
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
			if !slices.Equal(l.renewed, wantRenewed) {
				t.Fatalf("%s: renewed %q, want %q", path, l.renewed, wantRenewed)
			}
			for _, tok := range l.adopted {
				if !slices.Contains(wantRenewed, tok) || tok == known {
					t.Fatalf("%s: adoption of %q, not an unknown periodic token", path, tok)
				}
			}
			if n := reg.Get("catalog").Snapshot().InUse; n != 0 {
				t.Fatalf("%s: %d permits left taken by refused adoptions", path, n)
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
