package redisledger

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// Far from the limit the lease script grants a lease for twice the ttl and
// says so; near it, for the ttl.
func TestLeaseFarFromTheLimitLastsLonger(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	l := f.idle()
	n := func(a []any, i int) int64 { v, _ := a[i].(int64); return v }
	// Demand 1 on a limit of 10: far.
	a := f.leaseCall(l, "r1", 1, 1, 0, 1, 1, 3000)
	if len(a) < 11 || n(a, 0) != leaseHeld || n(a, 3) != 6000 || n(a, 10) != 1 {
		t.Fatalf("far from the limit: answer %v, want held, 6000 ms, far", a)
	}
	// Demand 4 more at another replica: 2 x 5 wanted is the limit, still
	// far; demand 5 there: near, for the ttl, and not far.
	if a := f.leaseCall(l, "r2", 1, 1, 0, 4, 4, 3000); n(a, 10) != 1 {
		t.Fatalf("2 x 5 wanted on a limit of 10: answer %v, want far", a)
	}
	a = f.leaseCall(l, "r2", 1, 2, 0, 5, 5, 3000)
	if n(a, 0) != leaseHeld || n(a, 3) != 3000 || n(a, 10) != 0 {
		t.Fatalf("near the limit: answer %v, want held, 3000 ms, not far", a)
	}
}

// leaseCallsNow is how many lease calls the fixture's recorder counted.
func (f *fixture) leaseCallsNow() int { n, _ := f.rec.leaseCalls(); return n }

// A lease granted far from the limit, whose demand holds, is renewed every
// leaseTicks ticks instead of each tick; a demand that grows past half its
// target is reported at the next round, and near the limit every round
// calls again.
func TestSteadyLeaseRenewedEveryFewTicks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	reg := capRegistry(t, bulkhead.Settings{MaxConcurrent: 10})
	a := f.capacity(t, capSpec{id: "a", prefix: "steady:", reg: reg})
	var tokens []string
	admit := func() {
		t.Helper()
		ad, err := a.Admit(ctx, capRequest(reg, bulkhead.Normal))
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, ad.Token)
	}
	testkit.Eventually(t, "a holds a lease", func() bool { h, _, _, ok := f.leaseOf("steady:", "a"); return ok && h > 0 })
	// One in use: a demand of 1, a target of 6 (2 x 1 + 8/2); 7 if the
	// Check came while the lease was being granted and counted as overflow
	// (a demand of 2: 4 + 6/2), which a far lease keeps (it shrinks by no
	// less than half). Either is at least twice the one in use, and less
	// than twice the four below.
	admit()
	testkit.Eventually(t, "the lease sized for one in use", func() bool {
		_, tg, _, _ := f.leaseOf("steady:", "a")
		return tg == 6 || tg == 7
	})

	t0, c0 := f.ticks(), f.leaseCallsNow()
	testkit.Eventually(t, "30 ticks", func() bool { return f.ticks() >= t0+30 })
	ticks, calls := f.ticks()-t0, f.leaseCallsNow()-c0
	if want := ticks / leaseTicks; calls < want-2 || calls > want+2 {
		t.Fatalf("a steady far lease: %d lease calls in %d ticks, want %d +- 2 (one each %d ticks)", calls, ticks, want, leaseTicks)
	}

	// Four in use: more than half the target, at the next round, right
	// after a renewal (the next one of a steady lease is leaseTicks away).
	c1 := f.leaseCallsNow()
	testkit.Eventually(t, "a renewal", func() bool { return f.leaseCallsNow() > c1 })
	for range 3 {
		admit()
	}
	t0, c0 = f.ticks(), f.leaseCallsNow()
	testkit.Eventually(t, "the grown demand's renewal", func() bool { return f.leaseCallsNow() > c0 })
	if d := f.ticks() - t0; d > 2 {
		t.Fatalf("a demand past half the lease reported %d ticks later, want at the next round", d)
	}

	// Near the limit (another replica wants 4 more: 2 x 8 wanted > 10):
	// renewed each tick.
	b := f.alone(Config{Prefix: "steady:", Replica: "b", Timeout: time.Second, Heartbeat: capHeartbeat, Tick: time.Hour})
	f.leaseBatchCall(b, "b", 10000, leaseBulkhead{"catalog", [leaseArgs]any{1, 1, 0, 4, 4, 0, 10, "0", 1, 0}})
	testkit.Eventually(t, "a's lease granted near the limit (for the ttl)", func() bool {
		_, _, end, ok := f.leaseOf("steady:", "a")
		return ok && end-f.redisNow() <= a.ttl.Milliseconds()
	})
	t0, c0 = f.ticks(), f.leaseCallsNow()
	testkit.Eventually(t, "10 ticks", func() bool { return f.ticks() >= t0+10 })
	if ticks, calls := f.ticks()-t0, f.leaseCallsNow()-c0; calls < ticks-2 {
		t.Fatalf("near the limit: %d lease calls in %d ticks, want one each tick", calls, ticks)
	}
	for _, tok := range tokens {
		if res := releaseSync(a, tok); res != permit.Released {
			t.Fatalf("release = %v", res)
		}
	}
}
