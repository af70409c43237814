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
	res, err := l.sc.lease.Run(context.Background(), f.rdb, l.keysOf("catalog"), replica, epoch, seq, need, used, peak, 0, 10,
		ttlMS, 0, 1000, "0", 1).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	a, _ := res.([]any)
	return a
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
