package redisledger

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// shareReplicas returns ledgers named ids on f's Redis with local shares
// and 100 ms ticks, not running: the test ticks each itself (one that
// stops ticking is cut off, or crashed).
func shareReplicas(f *fixture, ids ...string) []*Ledger {
	var ls []*Ledger
	for _, id := range ids {
		ls = append(ls, New(f.rdb, Config{Prefix: "test:", Replica: id, Timeout: time.Second, Tick: 100 * time.Millisecond,
			LocalShareFor: 10 * time.Second}, f.obs, f.rec, nil))
	}
	return ls
}

// waitAbsent waits until replica id has not looked at bulkhead name for
// longer than the others take to hold its share back (3 ticks).
func (f *fixture) waitAbsent(name, id string) {
	f.t.Helper()
	ctx := context.Background()
	testkit.Eventually(f.t, id+" absent for longer than 3 ticks", func() bool {
		seen, err := f.rdb.HGet(ctx, keysOf("test:", name)[12], id).Int64()
		now, terr := f.rdb.Time(ctx).Result()
		return err == nil && terr == nil && now.UnixMilli()-seen > 300
	})
}

// admitted acquires n permits of a bulkhead of limit through l and returns
// how many it got.
func admitted(l *Ledger, name string, limit, n int) int {
	got := 0
	for range n {
		if _, err := l.Acquire(context.Background(), req(name, settings(limit, 0, 0), bulkhead.Normal)); err == nil {
			got++
		}
	}
	return got
}

// After Redis lost its data, the share of a replica cut off across the loss
// is still held back (fault issue, finding 5): the replicas that reach
// Redis write back the presence it lost. Limit 4 over two replicas: the one
// cut off admits 2 alone, the other 2 (before: 4, and 6 in flight).
func TestPresenceRestoredAfterDataLoss(t *testing.T) {
	f := newFixture(t)
	ls := shareReplicas(f, "a", "b")
	a, b := ls[0], ls[1]
	ctx := context.Background()
	names := func() []string { return []string{"orders"} }
	a.tick(ctx, names, nil)
	b.tick(ctx, names, nil) // b looks, then is cut off
	a.tick(ctx, names, nil)
	seen, err := f.rdb.HGet(ctx, keysOf("test:", "orders")[12], "b").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	a.tick(ctx, names, nil)
	testkit.Eventually(t, "b cut off for longer than 3 ticks", func() bool {
		now, err := f.rdb.Time(ctx).Result()
		return err == nil && now.UnixMilli()-seen > 300
	})
	a.tick(ctx, names, nil)
	alone := b.Share("orders", settings(4, 0, 0)).MaxConcurrent
	if got := admitted(a, "orders", 4, 4); got+alone > 4 {
		t.Fatalf("a admitted %d and b may admit %d alone: %d in flight on a limit of 4", got, alone, got+alone)
	}
}

// The share a replica cut off admits alone is the share the others hold
// back (fault issue, finding 6): both divide the limit by the same count,
// the replicas that looked at the bulkhead and were not forgotten. Limit 3
// over four replicas, c crashed (gone from the live count after 3 ticks,
// still held back), then b cut off: b used to admit floor(3/3) = 1 while a
// held back floor(3/4) = 0 for it, 4 in flight.
func TestShareIsWhatOthersHoldBack(t *testing.T) {
	f := newFixture(t)
	ls := shareReplicas(f, "a", "b", "c", "d")
	a, b, c, d := ls[0], ls[1], ls[2], ls[3]
	ctx := context.Background()
	names := func() []string { return []string{"orders"} }
	for _, l := range []*Ledger{a, b, c, d, a, b, d} {
		l.tick(ctx, names, nil)
	}
	// c crashed: the live count forgets it.
	testkit.Eventually(t, "b counts 3 live replicas", func() bool {
		for _, l := range []*Ledger{a, b, d} {
			l.tick(ctx, names, nil)
		}
		return b.Replicas() == 3
	})
	// Then b is cut off.
	f.waitAbsent("orders", "b")
	a.tick(ctx, names, nil)
	alone := b.Share("orders", settings(3, 0, 0)).MaxConcurrent
	if got := admitted(a, "orders", 3, 3); got+alone > 3 {
		t.Fatalf("a admitted %d and b may admit %d alone: %d in flight on a limit of 3", got, alone, got+alone)
	}
}
