package shares

import (
	"testing"
	"time"
)

// fakeLender is a capacity lease as the manager sees it (Lend).
type fakeLender struct {
	backs, far bool
	keep       time.Duration // the keep Backs was last asked for
}

func (f *fakeLender) Backs(_ string, keep time.Duration) bool { f.keep = keep; return f.backs }
func (f *fakeLender) Far(string) bool                         { return f.far }

// TestLeaseNoLongerBacksShares: on capacity leases a share is pushed only
// while the lease backs it for the shares' Tail; once it does not (its end
// passed, this replica cut off from Redis), the very next response
// withdraws the share, before any round: a layer sent after the lease's
// end could outlive what Redis keeps.
func TestLeaseNoLongerBacksShares(t *testing.T) {
	s := newSizingMesh(t, 20, "a")
	lend := &fakeLender{backs: false, far: true}
	s.m.Lend(lend)
	s.m.report(s.nodes["a"], report(2))
	s.round()
	if got := s.share("a"); got >= 0 {
		t.Fatalf("a lease that does not back shares: share %d, want strict", got)
	}
	if lend.keep != s.m.Tail() {
		t.Fatalf("Backs asked for a keep of %s, want the Tail %s", lend.keep, s.m.Tail())
	}
	lend.backs = true
	s.round()
	if got := s.share("a"); got <= 0 {
		t.Fatalf("a lease that backs shares: share %d, want one", got)
	}
	before := held0(s)
	lend.backs = false
	r, err := s.m.response(s.nodes["a"]) // a re-send, no round between
	if err != nil {
		t.Fatal(err)
	}
	s.last["a"] = r
	if f := s.layerFields("a"); f[ShareKey(testCluster)] != 0 || f[StrictKey("orders")] != 100 {
		t.Fatalf("the response after the lease stopped backing: %v, want share 0 and strict", f)
	}
	// Its permits stay held until the Envoy reports them drained: the
	// layer may not have reached it.
	if got := held0(s); got != before {
		t.Fatalf("held %d after the withdrawal, want the %d of before until reports say", got, before)
	}
}

// TestAutoOnLeasesFollowsFar: in mode auto on capacity leases a bulkhead
// goes strict as soon as Redis grants the lease near the limit (its lease
// is then its replica's peak: no headroom for shares), and comes back
// after CalmRounds rounds far from it; mode shares ignores it.
func TestAutoOnLeasesFollowsFar(t *testing.T) {
	s := newSizingMesh(t, 20, "a")
	lend := &fakeLender{backs: true, far: true}
	s.m.Lend(lend)
	a := s.nodes["a"]
	step := func(far, want bool, what string) {
		t.Helper()
		lend.far = far
		s.m.report(a, report(2))
		s.round()
		if got := s.share("a") < 0; got != want {
			t.Fatalf("%s: strict %v, want %v", what, got, want)
		}
	}
	step(true, false, "far")
	step(false, true, "near")
	step(true, true, "first far round")
	step(true, true, "second far round")
	step(true, false, "third far round")
	s.m.Apply(map[string]Policy{"orders": {Mode: Shares, Cluster: testCluster}})
	step(false, false, "mode shares near the limit")
}

// TestLeaseUseAndKeep: a lease reports its shares' permits as what their
// Envoys use (demand, not the headroom handed out), and asks Redis to keep
// it the Tail while the bulkhead hands out shares or holds any; a
// bulkhead that leaves shares mode drains as its Envoy reports.
func TestLeaseUseAndKeep(t *testing.T) {
	s := newSizingMesh(t, 20, "a")
	s.m.Lend(&fakeLender{backs: true, far: true})
	s.m.report(s.nodes["a"], report(3))
	s.round()
	held, used := s.m.LeaseUse("orders")
	if held != held0(s) || held <= 3 || used != 3 {
		t.Fatalf("LeaseUse: held %d used %d, want the share's permits (%d) and 3 in use", held, used, held0(s))
	}
	if k := s.m.Keep("orders"); k != s.m.Tail() {
		t.Fatalf("Keep %s, want the Tail %s", k, s.m.Tail())
	}
	s.m.Apply(map[string]Policy{}) // strict now; the share drains
	if k := s.m.Keep("orders"); k != s.m.Tail() {
		t.Fatalf("Keep %s while permits are still held, want the Tail", k)
	}
	// Its Envoy reports 0 in flight: the share drains (before the
	// bulkhead's cluster stayed reported, the last count, 3, stayed held).
	for range 2 {
		s.settle(map[string]int{"a": 0})
	}
	if h := held0(s); h != 0 {
		t.Fatalf("%d permits still held after the share drained", h)
	}
	if k := s.m.Keep("orders"); k != 0 {
		t.Fatalf("Keep %s with no share and none held, want 0", k)
	}
}

func held0(s *sizingMesh) int { return held(s.m, "a", "orders") }
