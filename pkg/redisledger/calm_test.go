package redisledger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// A look's verdict makes a bulkhead calm only if nothing stirred it while
// the look was out; a calm bulkhead is due once every lookEvery ticks,
// another every tick.
func TestCalmVerdicts(t *testing.T) {
	c := newCalm()
	g := c.gens([]string{"x"})
	c.stir("x") // an arrival while the look was out
	c.looked("x", g[0], true)
	if c.isCalm("x") {
		t.Fatal("calm after a look that an arrival raced")
	}
	g = c.gens([]string{"x"})
	c.looked("x", g[0], true)
	if !c.isCalm("x") {
		t.Fatal("not calm after a quiet look")
	}
	g = c.gens([]string{"x"})
	c.stirAll() // Redis answers again
	c.looked("x", g[0], true)
	if c.isCalm("x") {
		t.Fatal("calm after stirAll, from a look sent before it")
	}
	g = c.gens([]string{"x"})
	c.looked("x", g[0], true)
	c.looked("x", g[0], false)
	if c.isCalm("x") {
		t.Fatal("calm after a look that found work")
	}
	c.looked("x", c.gens([]string{"x"})[0], true)
	seen := map[string]int{}
	for range 3 * lookEvery {
		for _, n := range c.due([]string{"x", "y"}) {
			seen[n]++
		}
	}
	if seen["x"] != 3 || seen["y"] != 3*lookEvery {
		t.Fatalf("over %d ticks: calm x due %d times (want 3), y %d (want %d)", 3*lookEvery, seen["x"], seen["y"], 3*lookEvery)
	}
}

// ticks counts the ticker's ticks (each says the replica is alive once).
func (f *fixture) ticks() int {
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	return f.rec.calls[admission.OpReplicas]
}

// afterItsLook waits until l's ticker is at the tick that looked at calm
// bulkhead name: its next look is lookEvery ticks away.
func afterItsLook(t *testing.T, l *Ledger, name string) {
	t.Helper()
	testkit.Eventually(t, "the tick of "+name+"'s look", func() bool {
		l.calm.mu.Lock()
		defer l.calm.mu.Unlock()
		return (spread(name)+l.calm.round)%lookEvery == 0
	})
}

// A replica looks at a calm bulkhead once every lookEvery ticks, not each
// tick: Redis runs the tick's replicas script and about a fifth of the
// bulkheads' state scripts (10 bulkheads each tick before).
func TestCalmBulkheadsLookedEveryFewTicks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("b%d", i))
	}
	f.replica("a", names...)
	start := f.ticks()
	testkit.Eventually(t, "two ticks", func() bool { return f.ticks() >= start+2 })
	t0, s0 := f.ticks(), f.redisScripts()
	testkit.Eventually(t, "30 ticks", func() bool { return f.ticks() >= t0+30 })
	t1, s1 := f.ticks(), f.redisScripts()
	n := t1 - t0
	looks := int(s1-s0) - n // one replicas script a tick
	want := n * len(names) / lookEvery
	// A tick between the two readings moves the count by one tick's
	// scripts: at most the replicas script and every bulkhead's look.
	if slack := len(names) + 1; looks < want-slack || looks > want+slack {
		t.Fatalf("%d looks at %d calm bulkheads in %d ticks, want %d +- %d (each every %d ticks)", looks, len(names), n, want, slack, lookEvery)
	}
}

// A bulkhead this replica stirs is looked at the next tick, and each tick
// while a permit is in use there, whichever replica releases it; a permit
// granted by a replica that then vanished is swept by a calm bulkhead's
// look within lookEvery ticks of its expiry.
func TestStirredBulkheadLookedEachTick(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	a := f.replica("a", "orders")
	other := f.alone(Config{Prefix: "test:", Replica: "b", Timeout: time.Second,
		Heartbeat: permit.Heartbeat{Interval: time.Second, TTL: time.Second}, Tick: time.Hour})
	inUse := func(n int) func() bool {
		return func() bool { g, ok := a.Global("orders"); return ok && g.InUse == n }
	}
	testkit.Eventually(t, "orders calm", func() bool { return a.calm.isCalm("orders") })
	// Right after the tick that looked at it: without the stir, its next
	// look would be lookEvery ticks away.
	afterItsLook(t, a, "orders")

	s := settings(2, 2, time.Second)
	tok, err := a.Acquire(ctx, req("orders", s, bulkhead.Normal))
	if err != nil {
		t.Fatal(err)
	}
	t0 := f.ticks()
	testkit.Eventually(t, "a's own grant in a's global count", inUse(1))
	if d := f.ticks() - t0; d > 2 {
		t.Fatalf("a's own grant seen %d ticks later, want at the next tick", d)
	}
	if _, res := other.ReleaseToken("orders", tok, permit.AccessLog); res != permit.Released {
		t.Fatalf("release: %v", res)
	}
	t0 = f.ticks()
	testkit.Eventually(t, "the other replica's release in a's global count", inUse(0))
	if d := f.ticks() - t0; d > 2 {
		t.Fatalf("a release by another replica seen %d ticks later, want at the next tick (a permit was in use)", d)
	}

	testkit.Eventually(t, "orders calm again", func() bool { return a.calm.isCalm("orders") })
	r := req("orders", s, bulkhead.Normal)
	r.TTL = 300 * time.Millisecond
	if _, err := other.Acquire(ctx, r); err != nil {
		t.Fatal(err)
	}
	t0 = f.ticks()
	testkit.Eventually(t, "the vanished replica's permit swept", func() bool { return f.inUse("orders") == 0 })
	// Its TTL is 3 ticks; then at most lookEvery ticks to its look, and
	// one for the readings.
	if d, most := f.ticks()-t0, 3+lookEvery+1; d > most {
		t.Fatalf("the permit swept %d ticks after its grant, want at most %d", d, most)
	}
	// The look's answer reaches a after Redis swept it.
	testkit.Eventually(t, "the permit ended by its TTL, at a", func() bool { return f.obs.count(permit.TTL) == 1 })
}

// With a capacity lease, a calm bulkhead's global count follows the lease's
// permits in use at each renewal (a tick), not only at its looks.
func TestCalmBulkheadCountedByItsLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reg := capRegistry(t, bulkhead.Settings{MaxConcurrent: 10})
	a := f.capacity(t, capSpec{id: "a", prefix: "calm:", reg: reg})
	testkit.Eventually(t, "a holds a lease", func() bool { h, _, _, ok := f.leaseOf("calm:", "a"); return ok && h > 0 })
	testkit.Eventually(t, "catalog calm", func() bool { return a.ledger.calm.isCalm("catalog") })
	afterItsLook(t, a.ledger, "catalog")
	var tokens []string
	for range 3 {
		ad, err := a.Admit(context.Background(), capRequest(reg, bulkhead.Normal))
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, ad.Token)
	}
	if n := a.inUse("catalog"); n != 3 {
		t.Fatalf("%d permits in use in a's lease, want 3", n)
	}
	t0 := f.ticks()
	testkit.Eventually(t, "the lease's use in a's global count", func() bool {
		g, ok := a.ledger.Global("catalog")
		return ok && g.InUse == 3
	})
	if d := f.ticks() - t0; d > 2 {
		t.Fatalf("the lease's use seen %d ticks later, want at the next renewal", d)
	}
	if !a.ledger.calm.isCalm("catalog") {
		t.Fatal("admissions from the lease stirred catalog: nothing of them is per request")
	}
	for _, tok := range tokens {
		if res := releaseSync(a, tok); res != permit.Released {
			t.Fatalf("release = %v", res)
		}
	}
}
