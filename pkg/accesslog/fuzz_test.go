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

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// recordingLedger records every Release and Renew it passes on to the
// real in-memory backend.
type recordingLedger struct {
	*admission.Memory
	released, renewed []string
}

func (l *recordingLedger) Release(e admission.Entry, done admission.Done) {
	l.released = append(l.released, e.Token)
	l.Memory.Release(e, done)
}

func (l *recordingLedger) Renew(e admission.Entry, done admission.Done) {
	l.renewed = append(l.renewed, e.Token)
	l.Memory.Renew(e, done)
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
			h := permit.Heartbeat{Interval: time.Second, TTL: 3 * time.Second}
			leases := permit.NewMemory(clock.Real{})
			l := &recordingLedger{Memory: admission.NewMemory(reg, leases, h)}
			rec := newFakeRecorder()
			s := New(l, rec, nil, WithHeartbeat(h))
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
			for _, lease := range holders(leases, "catalog") {
				if !slices.Contains(wantRenewed, lease.Token) {
					t.Fatalf("%s: adoption of %q, not a periodic token", path, lease.Token)
				}
			}
			if n, held := reg.Get("catalog").Snapshot().InUse, leases.Len(); n != held {
				t.Fatalf("%s: %d permits taken, %d held by leases", path, n, held)
			}
			leases.Close(permit.Shutdown)
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

func holders(l *permit.Memory, bulkhead string) []permit.Lease {
	ls, _ := l.Holders(bulkhead, 1<<20)
	return ls
}
