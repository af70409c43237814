package shares

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// sizingMesh is a manager and Envoys that acknowledge every layer at once.
type sizingMesh struct {
	t     *testing.T
	m     *Manager
	reg   *bulkhead.Registry
	clk   *clock.Fake
	limit int
	nodes map[string]*node
	last  map[string]*discovery.DiscoveryResponse // by node: the last layer it applied
}

func newSizingMesh(t *testing.T, limit int, ids ...string) *sizingMesh {
	t.Helper()
	return newSizingMeshWith(t, bulkhead.Settings{MaxConcurrent: limit}, ids...)
}

// newSizingMeshWith is newSizingMesh with bulkhead orders' settings.
func newSizingMeshWith(t *testing.T, set bulkhead.Settings, ids ...string) *sizingMesh {
	t.Helper()
	clk := clock.NewFake(t0)
	m, reg := newTestManagerWith(t, set, clk)
	s := &sizingMesh{t: t, m: m, reg: reg, clk: clk, limit: set.MaxConcurrent, nodes: map[string]*node{}, last: map[string]*discovery.DiscoveryResponse{}}
	for _, id := range ids {
		s.join(id)
	}
	return s
}

func (s *sizingMesh) join(id string) {
	s.nodes[id] = s.m.connect(id, "")
	s.m.lrsConnect(id)
}

// round runs a round and has every Envoy apply and acknowledge its layer.
func (s *sizingMesh) round() {
	s.t.Helper()
	s.m.Round()
	for _, n := range s.nodes {
		r, err := s.m.response(n)
		if err != nil {
			s.t.Fatal(err)
		}
		s.m.answer(n, &discovery.DiscoveryRequest{VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
		s.last[n.id] = r
	}
}

// share is the max_requests id's next layer says (-1: strict).
func (s *sizingMesh) share(id string) int { return s.shareOf(id, "orders") }

// shareOf is the max_requests id's next layer says for unit u (-1: strict).
func (s *sizingMesh) shareOf(id, u string) int {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	sh := s.nodes[id].shares[u]
	if sh == nil {
		return 0
	}
	return sh.wire()
}

func (s *sizingMesh) free() int { return s.limit - s.reg.Get("orders").Snapshot().InUse }

// settle lets every shrink pushed so far give its permits back: two
// reports of inflight after the acknowledgement and an interval.
func (s *sizingMesh) settle(inflight map[string]int) {
	for range 2 {
		for id, n := range s.nodes {
			if n.reported(testCritical) {
				s.m.report(n, reportBoth(inflight[id], 0))
				continue
			}
			s.m.report(n, report(inflight[id]))
		}
	}
	s.clk.Advance(testSettings().Interval)
	s.round()
}

// TestLoneEnvoyIsLentAllButTheReserve: a lone Envoy's share is the
// bulkhead's limit less a reserve of an eighth (not its demand plus half
// the slack: bursts above that were turned away while the mesh had room),
// the reserve stays free for strict requests, and an Envoy that joins gets
// its first share from the reserve at once, the rest once the lone share
// has shrunk.
func TestLoneEnvoyIsLentAllButTheReserve(t *testing.T) {
	s := newSizingMesh(t, 64, "a")
	s.m.report(s.nodes["a"], report(5))
	s.round()
	if got, free := s.share("a"), s.free(); got != 64-8 || free != 8 {
		t.Fatalf("a lone Envoy at 5 in flight got a share of %d with %d permits free; want 56 and the reserve of 8 free", got, free)
	}
	p, err := s.reg.Get("orders").TryAcquire(bulkhead.Normal)
	if err != nil {
		t.Fatalf("a strict request beside the lone share: %v", err)
	}
	p.Release()

	s.join("b")
	s.m.report(s.nodes["b"], report(0))
	s.round()
	if a, b := s.share("a"), s.share("b"); b < 1 || b > 8 || a >= 56 {
		t.Fatalf("b joined: shares a %d, b %d; want b's first share from the reserve (1-8) and a's shrinking", a, b)
	}
	s.settle(map[string]int{"a": 5})
	s.round()
	if a, b := s.share("a"), s.share("b"); b < 14 || a+b > 64 {
		t.Fatalf("once a's share shrank: a %d, b %d; want b to hold its part of the slack (>= 14)", a, b)
	}
}

// TestOverflowIsAPeak: a report whose circuit breaker turned requests away
// shows the Envoy at its share at that instant, however few requests it
// shows in flight: the share grows as for a demand above it (2 x), where
// the overflows' concurrency by Little's law (1 here) would not grow it.
func TestOverflowIsAPeak(t *testing.T) {
	s := newSizingMesh(t, 40, "a", "b")
	for _, n := range s.nodes {
		s.m.report(n, report(1))
	}
	s.round()
	before := s.share("a")
	if before != 10 {
		t.Fatalf("share %d at 1 in flight of 40 over two Envoys, want 1 + 38/4 = 10", before)
	}
	s.m.report(s.nodes["a"], reportDropped(2, 1000, 5))
	s.round()
	if got := s.share("a"); got < 2*(before+1) {
		t.Errorf("after its breaker turned 5 of 1,000 requests away at a share of %d: share %d, want >= %d", before, got, 2*(before+1))
	}
	if s.share("a") < 0 {
		t.Error("an overflow at a share of a quarter of the limit switched the bulkhead to strict")
	}
}

// TestLoneShareGivesTheReserveBack: a lone share that overflows grows
// into the reserve (2 x its demand); once the burst has left its last
// reports it gives the reserve back, though that is less than a quarter of
// it (no push for small changes otherwise).
func TestLoneShareGivesTheReserveBack(t *testing.T) {
	s := newSizingMesh(t, 64, "a")
	s.m.report(s.nodes["a"], report(3))
	s.round()
	s.m.report(s.nodes["a"], reportDropped(3, 1000, 10))
	s.round()
	if got, free := s.share("a"), s.free(); got != 64 || free != 0 {
		t.Fatalf("after a burst over a lone share of 56: share %d, %d free; want the whole limit", got, free)
	}
	for range recentReports {
		s.m.report(s.nodes["a"], report(3))
	}
	s.round()
	if got := s.share("a"); got != 56 {
		t.Fatalf("the burst out of its last %d reports: share %d, want 56 (the reserve given back)", recentReports, got)
	}
	s.settle(map[string]int{"a": 3})
	if free := s.free(); free != 8 {
		t.Errorf("the smaller share acknowledged and reported: %d free, want the reserve of 8", free)
	}
}

// TestStepCoveredInOneRound: a step from 10% to 60% of the limit at one of
// two Envoys (the e2e step, as reports) is covered at the next round: the
// free pool (half the slack) is there for it.
func TestStepCoveredInOneRound(t *testing.T) {
	s := newSizingMesh(t, 20, "a", "b")
	for _, n := range s.nodes {
		s.m.report(n, report(1))
	}
	s.round()
	// At its share, with 70 of 120 requests turned away: 12 wanted.
	s.m.report(s.nodes["a"], reportDropped(s.share("a"), 50, 70))
	s.round()
	if got := s.share("a"); got < 12 {
		t.Errorf("a step to 12 of 20 at one Envoy: share %d after one round, want >= 12", got)
	}
}

// TestSwitchThresholds: mode auto goes strict when demand reaches 75% of
// the limit and back to shares after CalmRounds rounds at or below 50%;
// a lone share's overflow, however large the share, is not demand at the
// switch (its overflows' concurrency is).
func TestSwitchThresholds(t *testing.T) {
	s := newSizingMesh(t, 20, "a")
	a := s.nodes["a"]
	step := func(inflight int, want bool, what string) {
		t.Helper()
		s.m.report(a, report(inflight))
		s.round()
		if got := s.share("a") < 0; got != want {
			t.Fatalf("%s (%d in flight of 20): strict %v, want %v", what, inflight, got, want)
		}
	}
	step(2, false, "far from the limit")
	s.m.report(a, reportDropped(2, 1000, 10)) // a burst over a share of 17
	s.round()
	if s.share("a") < 0 {
		t.Fatal("a burst over a lone share switched the bulkhead to strict")
	}
	step(14, false, "below 75%")
	step(15, true, "at 75%")
	step(11, true, "above 50%")
	step(10, true, "first calm round")
	step(10, true, "second calm round")
	step(10, false, "third calm round")
}
