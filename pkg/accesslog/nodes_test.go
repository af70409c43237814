package accesslog

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

const grace = 5 * time.Second

// fakeReleaser records ReleaseNode calls.
type fakeReleaser struct {
	mu    sync.Mutex
	calls []string
	freed chan string // every call is also sent here (buffered)
}

func newFakeReleaser() *fakeReleaser { return &fakeReleaser{freed: make(chan string, 64)} }

func (f *fakeReleaser) ReleaseNode(node string, src permit.Source) int {
	if src != permit.NodeLost {
		panic("ReleaseNode with source " + src.String())
	}
	f.mu.Lock()
	f.calls = append(f.calls, node)
	f.mu.Unlock()
	f.freed <- node
	return 3
}

func (f *fakeReleaser) released() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// fakeNodeRecorder records what Nodes measures.
type fakeNodeRecorder struct {
	mu            sync.Mutex
	lost, tracked int
}

func (r *fakeNodeRecorder) NodeLost(int) {
	r.mu.Lock()
	r.lost++
	r.mu.Unlock()
}

func (r *fakeNodeRecorder) NodesTracked(n int) {
	r.mu.Lock()
	r.tracked = n
	r.mu.Unlock()
}

func TestValidNodeID(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{
		"front-proxy": true,
		"sidecar~10.1.2.3~catalog-7d9f.shop~shop.svc.cluster.local": true,
		strings.Repeat("n", permit.MaxNodeIDLen):                    true,
		"!~":                                                        true,
		"":                                                          false,
		strings.Repeat("n", permit.MaxNodeIDLen+1): false,
		"with space":  false,
		"tab\there":   false,
		"new\nline":   false,
		"del\x7f":     false,
		"caf\xc3\xa9": false,
	}
	for id, want := range tests {
		if got := permit.ValidNodeID(id); got != want {
			t.Errorf("permit.ValidNodeID(%q) = %v, want %v", id, got, want)
		}
	}
}

// TestNodesReclaim drives the tracker through sequences of events on a fake
// clock and checks which nodes reclaimDue declares lost.
func TestNodesReclaim(t *testing.T) {
	t.Parallel()
	type step struct {
		open, close, heard string        // node ids ("" = none)
		advance            time.Duration // then move the clock
		lost               []string      // nodes lost by reclaimDue after this step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"lost exactly at the end of the grace period", []step{
			{open: "a"},
			{close: "a", advance: grace - time.Nanosecond},
			{advance: time.Nanosecond, lost: []string{"a"}},
			{advance: time.Hour}, // forgotten: never lost twice
		}},
		{"a stream back within the grace period keeps the node", []step{
			{open: "a"},
			{close: "a", advance: grace / 2},
			{open: "a", advance: grace},
			{close: "a", advance: grace - time.Nanosecond},
			{advance: time.Nanosecond, lost: []string{"a"}},
		}},
		{"a node with one stream left is not silent", []step{
			{open: "a"},
			{open: "a"},
			{close: "a", advance: 2 * grace},
			{close: "a", advance: grace, lost: []string{"a"}},
		}},
		{"a Check postpones the reclamation", []step{
			{open: "a"},
			{close: "a", advance: grace - time.Second},
			{heard: "a", advance: grace - time.Nanosecond},
			{advance: time.Nanosecond, lost: []string{"a"}},
		}},
		{"a Check while the node has streams changes nothing", []step{
			{open: "a", advance: time.Hour},
			{heard: "a"},
			{close: "a", advance: grace, lost: []string{"a"}},
		}},
		{"nodes are independent", []step{
			{open: "a"},
			{open: "b"},
			{close: "a", advance: time.Second},
			{close: "b", advance: grace - time.Second, lost: []string{"a"}},
			{advance: time.Second, lost: []string{"b"}},
		}},
		{"Checks of unknown nodes are ignored", []step{
			{heard: "ghost", advance: 2 * grace},
		}},
		{"invalid ids are not tracked", []step{
			{open: "has space"},
			{close: "has space", advance: 2 * grace},
		}},
		{"a lost node that comes back is tracked anew", []step{
			{open: "a"},
			{close: "a", advance: grace, lost: []string{"a"}},
			{open: "a", advance: 2 * grace},
			{close: "a", advance: grace, lost: []string{"a"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Unix(1_700_000_000, 0))
			rel := newFakeReleaser()
			n := NewNodes(rel, grace, WithNodesClock(clk))
			tracked := map[string]bool{}
			for i, s := range tt.steps {
				if s.open != "" {
					tracked[s.open] = n.Opened(s.open)
				}
				if s.close != "" && tracked[s.close] {
					n.Closed(s.close)
				}
				if s.heard != "" {
					n.Heard(s.heard)
				}
				clk.Advance(s.advance)
				before := len(rel.released())
				n.reclaimDue()
				got := rel.released()[before:]
				if strings.Join(got, ",") != strings.Join(s.lost, ",") {
					t.Fatalf("step %d: lost %v, want %v", i, got, s.lost)
				}
			}
		})
	}
}

func TestNodesNextDeadline(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	n := NewNodes(newFakeReleaser(), grace, WithNodesClock(clk))
	if _, ok := n.reclaimDue(); ok {
		t.Fatal("a deadline with no silent node")
	}
	for _, id := range []string{"a", "b"} {
		n.Opened(id)
	}
	n.Closed("a")
	clk.Advance(2 * time.Second)
	n.Closed("b")
	if d, ok := n.reclaimDue(); !ok || d != grace-2*time.Second {
		t.Fatalf("next = %v, %v; want %v (a's)", d, ok, grace-2*time.Second)
	}
	clk.Advance(grace - 2*time.Second)
	if d, ok := n.reclaimDue(); !ok || d != 2*time.Second {
		t.Fatalf("after a: next = %v, %v; want 2s (b's)", d, ok)
	}
}

func TestNodesCap(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	rec := &fakeNodeRecorder{}
	n := NewNodes(newFakeReleaser(), grace, WithNodesClock(clk), WithMaxNodes(2), WithNodesRecorder(rec))
	if !n.Opened("a") || !n.Opened("b") || !n.Opened("a") {
		t.Fatal("nodes under the cap not tracked")
	}
	if n.Opened("c") {
		t.Fatal("a third node tracked beyond the cap of 2")
	}
	if nodes, silent := n.Tracked(); nodes != 2 || silent != 0 {
		t.Fatalf("Tracked = %d, %d; want 2, 0", nodes, silent)
	}
	n.Closed("b")
	if _, silent := n.Tracked(); silent != 1 {
		t.Fatalf("silent = %d, want 1", silent)
	}
	clk.Advance(grace)
	n.reclaimDue()
	if !n.Opened("c") {
		t.Fatal("no room for a new node after one was lost")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.lost != 1 || rec.tracked != 2 {
		t.Fatalf("recorded lost %d tracked %d, want 1 and 2", rec.lost, rec.tracked)
	}
}

func TestNodesNil(t *testing.T) {
	t.Parallel()
	var n *Nodes
	if n.Opened("a") {
		t.Fatal("a nil tracker tracks")
	}
	n.Heard("a") // no panic
}

// TestNodesRun checks the goroutine: its one timer fires at the end of the
// grace period, a node falling silent while it idles re-arms it, and it
// stops with its context (goleak checks that it leaves nothing behind).
func TestNodesRun(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	rel := newFakeReleaser()
	n := NewNodes(rel, grace, WithNodesClock(clk))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()

	n.Opened("a")
	n.Opened("b")
	n.Closed("a") // wakes Run, which arms a timer for a
	waitFor(t, "timer armed for a", func() bool { return clk.Timers() == 1 })
	clk.Advance(grace / 2)
	n.Closed("b") // wakes Run again: one timer, re-armed for a's deadline
	waitFor(t, "timer re-armed", func() bool { return clk.Timers() == 1 })
	clk.Advance(grace / 2)
	if got := <-rel.freed; got != "a" {
		t.Fatalf("lost %q, want a", got)
	}
	waitFor(t, "timer armed for b", func() bool { return clk.Timers() == 1 })
	clk.Advance(grace / 2)
	if got := <-rel.freed; got != "b" {
		t.Fatalf("lost %q, want b", got)
	}
	waitFor(t, "no timer once nobody is silent", func() bool { return clk.Timers() == 0 })

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if got := rel.released(); len(got) != 2 {
		t.Fatalf("released %v, want a and b once each", got)
	}
}

// TestNodesReleaseLeases runs the tracker over a real ledger: only the lost
// node's permits go back, with source node_lost.
func TestNodesReleaseLeases(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	reg := bulkhead.NewRegistry()
	if _, err := reg.Apply(map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 10}}); err != nil {
		t.Fatal(err)
	}
	ledger := permit.NewMemory(clk)
	grant := func(node string) {
		p, err := reg.Get("catalog").TryAcquire(bulkhead.Normal)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ledger.Grant(p, permit.Grant{Bulkhead: "catalog", TTL: time.Hour, Node: node}); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range []string{"dead", "dead", "dead", "alive", ""} {
		grant(node)
	}
	rec := &fakeNodeRecorder{}
	n := NewNodes(ledger, grace, WithNodesClock(clk), WithNodesRecorder(rec))
	n.Opened("dead")
	n.Opened("alive")
	n.Closed("dead")
	clk.Advance(grace)
	n.reclaimDue()
	if got := reg.Get("catalog").Snapshot().InUse; got != 2 {
		t.Fatalf("in use = %d, want 2 (alive's and the unattributed one)", got)
	}
	if ledger.Len() != 2 {
		t.Fatalf("ledger holds %d leases, want 2", ledger.Len())
	}
	ledger.Close(permit.Shutdown)
}
