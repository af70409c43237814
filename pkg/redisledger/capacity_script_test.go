package redisledger

import (
	"context"
	"fmt"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func fmtSscan(s string, v ...any) (int, error) { return fmt.Sscan(s, v...) }

// leaseCall runs the lease script for replica of catalog (limit 10, ttl
// ttlMS) once and returns its answer.
func (f *fixture) leaseCall(l *Ledger, replica string, epoch, seq, need, used, peak int, ttlMS int64) []any {
	f.t.Helper()
	return f.leaseBatchCall(l, replica, ttlMS, leaseArgsOf("catalog", epoch, seq, need, used, peak))[0]
}

// leaseBulkhead is one bulkhead's part of a lease call in a test: its
// name and its arguments (limit 10, no overflow, not leaving).
type leaseBulkhead struct {
	name string
	args [leaseArgs]any
}

func leaseArgsOf(name string, epoch, seq, need, used, peak int) leaseBulkhead {
	return leaseBulkhead{name, [leaseArgs]any{epoch, seq, need, used, peak, 0, 10, "0", 1, 0}}
}

// leaseBatchCall runs the lease script for replica once, for every bulkhead
// of bs in one call, and returns each one's answer.
func (f *fixture) leaseBatchCall(l *Ledger, replica string, ttlMS int64, bs ...leaseBulkhead) [][]any {
	f.t.Helper()
	var keys []string
	args := []any{replica, ttlMS, 0, 1000}
	for _, b := range bs {
		keys = append(keys, l.keysOf(b.name)...)
		args = append(args, b.args[:]...)
	}
	res, err := l.sc.lease.Run(context.Background(), f.rdb, keys, args...).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	a, _ := res.([]any)
	if len(a) != len(bs) {
		f.t.Fatalf("%d answers for %d bulkheads: %v", len(a), len(bs), res)
	}
	out := make([][]any, len(a))
	for i := range a {
		out[i], _ = a[i].([]any)
	}
	return out
}

func (f *fixture) leased() int {
	v, _ := f.rdb.HGet(context.Background(), Key("test:", "catalog", "s"), "leased").Int()
	return v
}

// The lease script is idempotent per (replica, bulkhead, epoch): run twice
// with one seq it answers as once and counts once; an older call run late
// changes nothing; a later call of an epoch Redis does not hold is told
// the lease is lost.
func TestLeaseScriptRunTwiceGrantsOnce(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	first := f.leaseCall(l, "a", 1, 1, 0, 0, 2, 60000)
	again := f.leaseCall(l, "a", 1, 1, 0, 0, 2, 60000)
	if first[0].(int64) != leaseHeld || again[0].(int64) != leaseHeld || first[1] != again[1] || first[2] != again[2] {
		t.Fatalf("run twice: %v then %v, want one answer", first[:3], again[:3])
	}
	held := int(first[2].(int64))
	if held == 0 || f.leased() != held {
		t.Fatalf("held %d, leased %d: counted %d times", held, f.leased(), f.leased()/max(held, 1))
	}
	// Another replica's lease and the first one's next call.
	f.leaseCall(l, "b", 1, 1, 0, 0, 1, 60000)
	next := f.leaseCall(l, "a", 1, 2, held, 0, 0, 60000)
	if next[0].(int64) != leaseHeld {
		t.Fatalf("next call: %v", next)
	}
	sum := f.leased()
	if stale := f.leaseCall(l, "a", 1, 1, 0, 0, 9, 60000); stale[0].(int64) != leaseStale || f.leased() != sum {
		t.Fatalf("an older call run late: %v, leased %d -> %d", stale[:3], sum, f.leased())
	}
	if lost := f.leaseCall(l, "c", 1, 5, 0, 0, 1, 60000); lost[0].(int64) != leaseLost || f.leased() != sum {
		t.Fatalf("a later call of an epoch Redis does not hold: %v", lost[:3])
	}
	f.counts("catalog")
}

// Redis reclaims a lease only after its end on Redis's clock.
func TestLeaseReclaimedOnlyAfterItsEnd(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	a := f.leaseCall(l, "a", 1, 1, 0, 0, 2, 300)
	end := a[5].(int64) + 300
	if f.leased() == 0 {
		t.Fatal("no lease")
	}
	testkit.Eventually(t, "the lease reclaimed", func() bool {
		// Any script sweeps; the state script is the replicas' look.
		l.look(context.Background(), "catalog")
		return f.leased() == 0
	})
	if now := f.redisNow(); now <= end {
		t.Fatalf("reclaimed by %d, its end %d", now, end)
	}
	if _, _, _, ok := f.leaseOf("test:", "a"); ok {
		t.Fatal("the reclaimed lease is still in CL")
	}
}

// leasedOf is what Redis counts as leased of bulkhead name (prefix test:).
func (f *fixture) leasedOf(name string) int {
	v, _ := f.rdb.HGet(context.Background(), Key("test:", name, "s"), "leased").Int()
	return v
}

// A batch of leases is idempotent per bulkhead: run twice (a client that
// retried after a lost answer), every bulkhead answers as the first run
// and is counted once; and in one call each bulkhead gets its own answer,
// held, stale or lost, as if it had been called alone.
func TestLeaseBatchRunTwiceGrantsOnce(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	names := []string{"catalog", "orders", "search"}
	var first []leaseBulkhead
	for _, name := range names {
		first = append(first, leaseArgsOf(name, 1, 1, 0, 0, 2))
	}
	once := f.leaseBatchCall(l, "a", 60000, first...)
	again := f.leaseBatchCall(l, "a", 60000, first...)
	for i, name := range names {
		if once[i][0].(int64) != leaseHeld || again[i][0] != once[i][0] || again[i][1] != once[i][1] || again[i][2] != once[i][2] {
			t.Fatalf("%s run twice: %v then %v, want one answer", name, once[i][:3], again[i][:3])
		}
		held := int(once[i][2].(int64))
		if held == 0 || f.leasedOf(name) != held {
			t.Fatalf("%s: held %d, leased %d: counted %d times", name, held, f.leasedOf(name), f.leasedOf(name)/max(held, 1))
		}
	}
	// One call: catalog's next seq (held), orders' first seq again, late
	// (stale once seq 2 is in), auth with a later seq of an epoch Redis
	// does not hold (lost).
	f.leaseBatchCall(l, "a", 60000, leaseArgsOf("orders", 1, 2, 0, 0, 2))
	sums := map[string]int{}
	for _, name := range names {
		sums[name] = f.leasedOf(name)
	}
	mixed := f.leaseBatchCall(l, "a", 60000, leaseArgsOf("catalog", 1, 2, 0, 0, 2), leaseArgsOf("orders", 1, 1, 0, 0, 9),
		leaseArgsOf("auth", 1, 5, 0, 0, 2))
	if mixed[0][0].(int64) != leaseHeld || mixed[1][0].(int64) != leaseStale || mixed[2][0].(int64) != leaseLost {
		t.Fatalf("one call, three bulkheads: %v, %v, %v; want held, stale, lost", mixed[0][:3], mixed[1][:3], mixed[2][:3])
	}
	for _, name := range []string{"orders", "auth"} {
		if f.leasedOf(name) != sums[name] {
			t.Fatalf("%s: leased %d -> %d by a stale or lost call", name, sums[name], f.leasedOf(name))
		}
	}
	for _, name := range names {
		f.counts(name)
	}
}

// A command that fails for one bulkhead of a batch (its key holds the
// wrong type) fails that bulkhead's answer alone: the others are granted,
// as if called alone.
func TestLeaseBatchOneBulkheadFails(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	if err := f.rdb.Set(context.Background(), Key("test:", "orders", "cl"), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	a := f.leaseBatchCall(l, "a", 60000, leaseArgsOf("catalog", 1, 1, 0, 0, 2), leaseArgsOf("orders", 1, 1, 0, 0, 2),
		leaseArgsOf("search", 1, 1, 0, 0, 2))
	if a[1][0].(int64) != leaseFailed {
		t.Fatalf("orders, whose lease key is a string: %v, want LEASE_FAILED", a[1])
	}
	t.Logf("orders: %v", a[1])
	for _, i := range []int{0, 2} {
		if a[i][0].(int64) != leaseHeld || a[i][2].(int64) == 0 {
			t.Fatalf("bulkhead %d beside a failing one: %v, want a lease held", i, a[i][:3])
		}
	}
	if f.leasedOf("catalog") == 0 || f.leasedOf("search") == 0 {
		t.Fatalf("leased: catalog %d, search %d", f.leasedOf("catalog"), f.leasedOf("search"))
	}
}

// A call whose keys and arguments are no whole number of bulkheads is
// refused, before anything is changed.
func TestLeaseBatchMismatchRefused(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	b := leaseArgsOf("catalog", 1, 1, 0, 0, 2)
	err := l.sc.lease.Run(context.Background(), f.rdb, l.keysOf("catalog"), append([]any{"a", 60000, 0, 1000}, b.args[:leaseArgs-1]...)...).Err()
	if err == nil {
		t.Fatal("a call with a bulkhead's arguments short was run")
	}
	if f.leasedOf("catalog") != 0 {
		t.Fatalf("leased %d after a refused call", f.leasedOf("catalog"))
	}
}

// A lease that backs shares (keep > 0) is counted keep after its end:
// the replica admits from it for its life (the answer's ms left, the same
// when the call runs again), Redis reclaims it only keep later (an Envoy
// may use a share that long after the replica's last word).
func TestLeaseKeptAfterItsEnd(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	b := leaseArgsOf("catalog", 1, 1, 0, 0, 2)
	b.args[9] = 700
	a := f.leaseBatchCall(l, "a", 300, b)[0]
	// Far from the limit: twice the ttl (FAR_LEASE), and not the keep.
	life := a[3].(int64)
	if a[0].(int64) != leaseHeld || life != 600 {
		t.Fatalf("answer %v: want held, 600 ms left (the keep is Redis's alone)", a)
	}
	if again := f.leaseBatchCall(l, "a", 300, b)[0]; again[3].(int64) > life {
		t.Fatalf("the call run again: %d ms left, more than the lease's %d", again[3], life)
	}
	end := a[5].(int64) + life
	testkit.Eventually(t, "the lease reclaimed", func() bool {
		l.look(context.Background(), "catalog")
		return f.leased() == 0
	})
	if now := f.redisNow(); now <= end+700 {
		t.Fatalf("reclaimed by %d, %d ms after its end: want after its keep, 700 ms", now, now-end)
	}
	f.counts("catalog")
}
