package accesslog

import (
	"context"
	"testing"
	"time"

	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// openStream opens an access-log stream and sends msgs on it; the returned
// func closes it and waits for the server's handler to return.
func (e *env) openStream(t *testing.T, msgs ...*alsv3.StreamAccessLogsMessage) (closeStream func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	stream, err := e.client.StreamAccessLogs(ctx)
	if err != nil {
		cancel()
		t.Fatalf("StreamAccessLogs: %v", err)
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			cancel()
			t.Fatalf("Send: %v", err)
		}
	}
	return func() {
		defer cancel()
		if _, err := stream.CloseAndRecv(); err != nil {
			t.Fatalf("CloseAndRecv: %v", err)
		}
	}
}

func TestStreamsTrackNodes(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	rel := newFakeReleaser()
	nodes := NewNodes(rel, grace, WithNodesClock(clk))
	e := newEnv(t, func(s *Server) { s.nodes = nodes })
	tracked := func(wantNodes, wantSilent int) func() bool {
		return func() bool { n, s := nodes.Tracked(); return n == wantNodes && s == wantSilent }
	}

	// Streams without an identifier, or with an invalid node id, are not
	// tracked.
	e.openStream(t, httpLogs(nil, endOf(e.grant(t))))()
	e.openStream(t, httpLogs(ident("bad node"), endOf(e.grant(t))))()
	e.openStream(t, httpLogs(ident(""), endOf(e.grant(t))))()
	if n, _ := nodes.Tracked(); n != 0 {
		t.Fatalf("tracked %d nodes, want 0", n)
	}

	// Two workers of one node: the node falls silent when both are gone.
	first := e.openStream(t, httpLogs(ident("n1"), endOf(e.grant(t))))
	second := e.openStream(t, httpLogs(ident("n1")))
	waitFor(t, "two streams of n1", func() bool {
		v, ok := nodes.index.Load("n1")
		return ok && v.(*node).streams.Load() == 2
	})
	first()
	if _, silent := nodes.Tracked(); silent != 0 {
		t.Fatal("n1 silent with a stream open")
	}
	second()
	waitFor(t, "n1 silent", tracked(1, 1))

	// Only the first message's identifier counts.
	third := e.openStream(t, httpLogs(ident("n2")), httpLogs(ident("n3")))
	waitFor(t, "n2 tracked", tracked(2, 1))
	if _, ok := nodes.index.Load("n3"); ok {
		t.Fatal("a later identifier was tracked")
	}
	third()

	clk.Advance(grace)
	nodes.reclaimDue()
	if got := rel.released(); len(got) != 2 {
		t.Fatalf("lost %v, want n1 and n2", got)
	}
}
