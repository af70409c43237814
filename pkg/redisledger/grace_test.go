package redisledger

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// A periodic entry that arrives a little after its lease expired, within
// expiryGrace, renews the lease (Renewed, not adopted), whichever script
// sweeps first in between: the renewal's own, a replica's look, or an
// arrival that would take the permit. The permit is counted all along, and
// the limit holds. The cost: a lease nobody renews is reclaimed grace
// after its expiry, not at it.
func TestRenewalWithinGraceRenews(t *testing.T) {
	const ttl = 200 * time.Millisecond
	for _, tc := range []struct {
		name  string
		first func(t *testing.T, l *Ledger) // runs in the grace, before the renewal
	}{
		{"the renewal sweeps first", func(*testing.T, *Ledger) {}},
		{"a look sweeps first", func(_ *testing.T, l *Ledger) { l.look(context.Background(), "orders") }},
		{"an arrival sweeps first", func(t *testing.T, l *Ledger) {
			_, err := l.Acquire(context.Background(), req("orders", settings(1, 0, 0), bulkhead.Normal))
			if !errors.Is(err, bulkhead.ErrQueueFull) {
				t.Errorf("arrival in the grace: %v, want refused (the permit is still held)", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			l := f.idle() // no ticker: only the test's calls sweep
			r := req("orders", settings(1, 0, 0), bulkhead.Normal)
			r.TTL = ttl
			tok, err := l.Acquire(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			granted := time.Now() // the grant was at or before this, on Redis's clock (same host)
			low := f.watchInUse("orders")

			// The fault's moment: the heartbeat is late. Sleeping lets the
			// lease lapse; nothing else waits on it.
			time.Sleep(ttl + 50*time.Millisecond)
			tc.first(t, l)
			_, res := l.RenewToken("orders", tok, ttl, "node-a")
			if late := time.Since(granted); late >= ttl+expiryGrace {
				t.Fatalf("renewed %v after the grant, past the grace: the test shows nothing", late)
			}
			if res != permit.Renewed {
				t.Fatalf("renewal %v after expiry: %v, want renewed", time.Since(granted)-ttl, res)
			}
			if got := low(); got != 1 {
				t.Errorf("permits in use fell to %d in the grace, want 1 throughout", got)
			}
			if n := f.obs.count(permit.TTL); n != 0 {
				t.Errorf("%d leases reclaimed in the grace, want 0", n)
			}
			if got := f.inUse("orders"); got != 1 {
				t.Errorf("in use %d after the renewal, want 1", got)
			}

			// Nobody renews it again (its Envoy died): a look reclaims it,
			// grace after its expiry and not before.
			renewed := time.Now() // the renewal was before this
			testkit.Eventually(t, "lease reclaimed", func() bool {
				l.look(context.Background(), "orders")
				return f.inUse("orders") == 0
			})
			if took, least := time.Since(renewed), ttl+expiryGrace; took < least-10*time.Millisecond {
				t.Errorf("reclaimed %v after the renewal, want at least ttl+grace (%v)", took, least)
			}
			if n := f.obs.count(permit.TTL); n != 1 {
				t.Errorf("%d leases reclaimed, want 1", n)
			}
		})
	}
}

// watchInUse samples bulkhead name's count of permits in use until the
// test ends; the function it returns gives the lowest seen so far.
func (f *fixture) watchInUse(name string) func() int {
	f.t.Helper()
	var low atomic.Int64
	low.Store(int64(f.inUse(name)))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			v, err := f.rdb.HGet(ctx, Key("test:", name, "s"), "inuse").Int64()
			if err == nil && v < low.Load() {
				low.Store(v)
			}
			time.Sleep(time.Millisecond) // a sampling period, not a wait for anything
		}
	}()
	f.t.Cleanup(func() { cancel(); wg.Wait() })
	return func() int { return int(low.Load()) }
}
