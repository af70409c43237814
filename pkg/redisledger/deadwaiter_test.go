package redisledger

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// The bound on a waiter whose replica died while it waited (nobody will
// take its permit or leave the queue for it). Until its deadline in Redis
// (its wait plus a second) it may be granted by a release, like any waiter:
// the permit is then held by nobody for the lease the waiter asked for, and
// reclaimed by the first sweep expiryGrace after that lease's end; the
// limit holds meanwhile. Without a release it is purged at that deadline.
func TestDeadReplicasWaiterHoldsAPermitForItsLease(t *testing.T) {
	const lease = 300 * time.Millisecond
	f := newFixture(t)
	l := f.idle() // replica "a", alive; no ticker: only the test's calls sweep
	s := settings(1, 1, 5*time.Second)
	holder, err := l.Acquire(context.Background(), req("orders", s, bulkhead.Normal))
	if err != nil {
		t.Fatal(err)
	}

	// Replica "dead" queues a waiter, then dies: it runs the acquire
	// script and nothing else (no leave, no wake-up read).
	dead := New(f.rdb, Config{Prefix: "test:", Replica: "dead", Timeout: time.Second, Heartbeat: permit.Heartbeat{Interval: time.Second, TTL: time.Second},
		Tick: time.Hour}, f.obs, f.rec, nil)
	waiter, err := permit.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	r := req("orders", s, bulkhead.Normal)
	r.TTL = lease
	res, err := dead.sc.acquire.Run(context.Background(), f.rdb, dead.keysOf("orders"),
		dead.acquireArgs(waiter, r, s.MaxWait)...).Result()
	if code, _, _, _ := reply(res); err != nil || code != acquireQueued {
		t.Fatalf("dead replica's arrival: %v %v, want queued", res, err)
	}

	// The holder's request ends: the release hands the permit to the dead
	// replica's waiter, first in the queue.
	released := time.Now() // the grant is at or after this, on Redis's clock (same host)
	if _, res := l.ReleaseToken("orders", holder, permit.AccessLog); res != permit.Released {
		t.Fatalf("release: %v", res)
	}
	if inuse, qlen := f.counts("orders"); inuse != 1 || qlen != 0 {
		t.Fatalf("after the release: %d in use, %d queued; want the waiter granted (1, 0)", inuse, qlen)
	}
	// Held by nobody, the permit still counts: an arrival is refused.
	if _, err := l.Acquire(context.Background(), req("orders", settings(1, 0, 0), bulkhead.Normal)); !errors.Is(err, bulkhead.ErrQueueFull) {
		t.Fatalf("arrival while the dead waiter's permit is held: %v, want refused", err)
	}

	testkit.Eventually(t, "dead waiter's permit reclaimed", func() bool {
		l.look(context.Background(), "orders")
		return f.inUse("orders") == 0
	})
	held := time.Since(released)
	if least := lease + expiryGrace; held < least-10*time.Millisecond {
		t.Errorf("reclaimed %v after the grant, want no sooner than lease+grace (%v)", held, least)
	}
	if most := lease + expiryGrace + time.Second; held > most {
		t.Errorf("reclaimed %v after the grant, want within %v", held, most)
	}
	t.Logf("held by nobody for %v (lease %v, grace %v)", held, lease, expiryGrace)
	if n := f.obs.count(permit.TTL); n != 1 {
		t.Errorf("%d leases reclaimed by TTL, want 1", n)
	}
	if _, err := l.Acquire(context.Background(), req("orders", settings(1, 0, 0), bulkhead.Normal)); err != nil {
		t.Fatalf("arrival after the reclaim: %v, want granted", err)
	}
}

// Without a release, a dead replica's waiter holds a place in the queue
// until its deadline in Redis, its wait plus a second, and is purged by the
// first sweep after it.
func TestDeadReplicasWaiterIsPurgedAtItsDeadline(t *testing.T) {
	const wait = 200 * time.Millisecond
	f := newFixture(t)
	l := f.idle()
	s := settings(1, 1, wait)
	if _, err := l.Acquire(context.Background(), req("orders", s, bulkhead.Normal)); err != nil {
		t.Fatal(err)
	}
	dead := New(f.rdb, Config{Prefix: "test:", Replica: "dead", Timeout: time.Second, Tick: time.Hour}, f.obs, f.rec, nil)
	waiter, err := permit.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	queued := time.Now() // the waiter's deadline is counted from at or after this
	res, err := dead.sc.acquire.Run(context.Background(), f.rdb, dead.keysOf("orders"),
		dead.acquireArgs(waiter, req("orders", s, bulkhead.Normal), wait)...).Result()
	if code, _, _, _ := reply(res); err != nil || code != acquireQueued {
		t.Fatalf("dead replica's arrival: %v %v, want queued", res, err)
	}
	testkit.Eventually(t, "dead waiter purged", func() bool {
		l.look(context.Background(), "orders")
		_, qlen := f.counts("orders")
		return qlen == 0
	})
	if took, least := time.Since(queued), wait+time.Second; took < least-10*time.Millisecond {
		t.Errorf("purged %v after it queued, want no sooner than wait + 1 s (%v)", took, least)
	}
}
