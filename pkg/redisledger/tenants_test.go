package redisledger

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// tenantReq is a Check of tenant on bulkhead name, whose tenant template is
// tmpl (at most 10 tenants).
func tenantReq(name string, s, tmpl bulkhead.Settings, tenant string, p bulkhead.Priority) Request {
	r := req(name, s, p)
	r.Tenant, r.TenantSettings, r.MaxTenants = tenant, &tmpl, 10
	return r
}

// enqueue runs the acquire script for a new token of r, as a Check that
// then waits would (the ledger does not wait: the test reads Redis), and
// returns the token and the script's code and detail.
func (f *fixture) enqueue(l *Ledger, r Request) (token string, code int64, detail any) {
	f.t.Helper()
	token, err := permit.NewToken()
	if err != nil {
		f.t.Fatal(err)
	}
	res, err := l.sc.acquire.Run(context.Background(), f.rdb, l.keysOf(r.Bulkhead), l.acquireArgs(token, r, 5*time.Second)...).Result()
	if err != nil {
		f.t.Fatalf("acquire script: %v", err)
	}
	code, detail, _, _ = reply(res)
	return token, code, detail
}

// granted reports whether token holds a lease of bulkhead name.
func (f *fixture) granted(name, token string) bool {
	return f.rdb.ZScore(context.Background(), keysOf("test:", name)[1], token).Err() == nil
}

// Finding 7 of the fault issue: a waiter blocked only by its tenant's own
// limit waits in its tenant's compartment, as in memory, and takes no place
// of the bulkhead's queue. Tenant x holds its one permit and has two
// waiters; the bulkhead's queue holds two: tenant y, with 3 of 4 permits
// free, is granted at once (it was refused queue_full).
func TestTenantWaiterTakesNoPlaceInTheBulkheadQueue(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, tmpl := settings(4, 2, 5*time.Second), settings(1, 2, 5*time.Second)
	if _, err := l.Acquire(ctx, tenantReq("orders", s, tmpl, "x", bulkhead.Normal)); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, code, _ := f.enqueue(l, tenantReq("orders", s, tmpl, "x", bulkhead.Normal)); code != acquireQueued {
			t.Fatalf("x's waiter %d: code %d, want queued", i+1, code)
		}
	}
	if _, err := l.Acquire(ctx, tenantReq("orders", s, tmpl, "y", bulkhead.Normal)); err != nil {
		t.Fatalf("tenant y, 3 of 4 permits free: %v", err)
	}
	// x's compartment is bounded by its own max_queue (2): a third waiter
	// of the same class is refused.
	if _, code, detail := f.enqueue(l, tenantReq("orders", s, tmpl, "x", bulkhead.Normal)); code != acquireRejected || detail != "queue_full" {
		t.Fatalf("x's third waiter: %d %v, want rejected queue_full", code, detail)
	}
	if inuse, qlen := f.counts("orders"); inuse != 2 || qlen != 0 {
		t.Fatalf("inuse %d, qlen %d; want 2, 0", inuse, qlen)
	}
}

// Waiters blocked by their tenant, more than the pump ever looked at (it
// scanned 64 per class), stand before a grantable waiter of their class and
// one of a lower class: the freed permit goes to the grantable waiter of the
// higher class, not the lower one.
func TestTenantWaitersLetNoLowerClassOvertake(t *testing.T) {
	for _, tc := range []struct{ class, lower bulkhead.Priority }{
		{bulkhead.Critical, bulkhead.Normal},
		{bulkhead.Normal, bulkhead.BestEffort},
	} {
		t.Run(tc.class.String(), func(t *testing.T) {
			f := newFixture(t)
			l := f.idle()
			ctx := context.Background()
			s, tmpl := settings(3, 100, 5*time.Second), settings(1, 100, 5*time.Second)
			if _, err := l.Acquire(ctx, tenantReq("orders", s, tmpl, "x", tc.class)); err != nil {
				t.Fatal(err)
			}
			var held []string
			for range 2 {
				tok, err := l.Acquire(ctx, req("orders", s, bulkhead.Critical))
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, tok)
			}
			for i := range 70 {
				if _, code, _ := f.enqueue(l, tenantReq("orders", s, tmpl, "x", tc.class)); code != acquireQueued {
					t.Fatalf("x's waiter %d: code %d", i+1, code)
				}
			}
			y, code, _ := f.enqueue(l, tenantReq("orders", s, tmpl, "y", tc.class))
			low, code2, _ := f.enqueue(l, tenantReq("orders", s, tmpl, "z", tc.lower))
			if code != acquireQueued || code2 != acquireQueued {
				t.Fatalf("codes %d, %d; want queued", code, code2)
			}
			if _, res := l.ReleaseToken("orders", held[0], permit.AccessLog); res != permit.Released {
				t.Fatalf("release: %v", res)
			}
			if !f.granted("orders", y) || f.granted("orders", low) {
				t.Fatalf("after the release: y granted %v, the %s waiter granted %v; want true, false",
					f.granted("orders", y), tc.lower, f.granted("orders", low))
			}
			if inuse, _ := f.counts("orders"); inuse != 3 {
				t.Fatalf("in use %d, want 3", inuse)
			}
			if n := f.rdb.HGet(ctx, keysOf("test:", "orders")[8], "x").Val(); n != "1" {
				t.Fatalf("tenant x holds %s permits, want 1 (its limit)", n)
			}
		})
	}
}

// An arrival that names no tenant leaves the tenants' limits as they are:
// the freed permit goes to the waiter without a tenant, not to tenant x's
// waiter past x's limit (the arrival set the stored tenant limit to 0).
func TestArrivalWithoutTenantKeepsTheTenantLimit(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	ctx := context.Background()
	s, tmpl := settings(2, 4, 5*time.Second), settings(1, 4, 5*time.Second)
	if _, err := l.Acquire(ctx, tenantReq("orders", s, tmpl, "x", bulkhead.Normal)); err != nil {
		t.Fatal(err)
	}
	held, err := l.Acquire(ctx, req("orders", s, bulkhead.Normal))
	if err != nil {
		t.Fatal(err)
	}
	x, code, _ := f.enqueue(l, tenantReq("orders", s, tmpl, "x", bulkhead.Normal))
	other, code2, _ := f.enqueue(l, req("orders", s, bulkhead.Normal))
	if code != acquireQueued || code2 != acquireQueued {
		t.Fatalf("codes %d, %d; want queued", code, code2)
	}
	if _, res := l.ReleaseToken("orders", held, permit.AccessLog); res != permit.Released {
		t.Fatalf("release: %v", res)
	}
	if f.granted("orders", x) || !f.granted("orders", other) {
		t.Fatalf("x's waiter granted %v, the other granted %v; want false, true", f.granted("orders", x), f.granted("orders", other))
	}
}

// A waiter in its tenant's compartment is as idempotent per token as one in
// a class queue: a repeated acquire is queued once, a repeated release or
// leave finds it gone.
func TestCompartmentScriptsRunTwiceCountOnce(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	ctx := context.Background()
	s, tmpl := settings(4, 4, 5*time.Second), settings(1, 4, 5*time.Second)
	if _, err := l.Acquire(ctx, tenantReq("orders", s, tmpl, "x", bulkhead.Normal)); err != nil {
		t.Fatal(err)
	}
	var toks [2]string
	for i := range toks {
		var err error
		if toks[i], err = permit.NewToken(); err != nil {
			t.Fatal(err)
		}
	}
	acquire := func(tok string) [2]int64 {
		return f.twice(l, l.sc.acquire, "orders", l.acquireArgs(tok, tenantReq("orders", s, tmpl, "x", bulkhead.Normal), 5*time.Second)...)
	}
	for _, step := range []struct {
		name string
		run  func() [2]int64
		want [2]int64
		left int64 // waiters in the compartment after it
	}{
		{"acquire", func() [2]int64 { return acquire(toks[0]) }, [2]int64{acquireQueued, acquireQueued}, 1},
		{"release", func() [2]int64 { return f.twice(l, l.sc.release, "orders", toks[0], 0, 2000) },
			[2]int64{releaseWaiter, releaseDuplicate}, 0},
		{"acquire again", func() [2]int64 { return acquire(toks[1]) }, [2]int64{acquireQueued, acquireQueued}, 1},
		{"leave", func() [2]int64 { return f.twice(l, l.sc.leave, "orders", toks[1], "0") },
			[2]int64{leaveLeft, leaveNotFound}, 0},
	} {
		if got := step.run(); got != step.want {
			t.Errorf("%s: codes %v, want %v", step.name, got, step.want)
		}
		if inuse, qlen := f.counts("orders"); inuse != 1 || qlen != 0 {
			t.Errorf("%s: inuse %d, qlen %d; want 1, 0", step.name, inuse, qlen)
		}
		if n := f.rdb.ZCard(ctx, Key("test:", "orders", "tw")).Val(); n != step.left {
			t.Errorf("%s: %d in the compartment, want %d", step.name, n, step.left)
		}
		if n := f.rdb.HLen(ctx, Key("test:", "orders", "tm")).Val(); n != step.left {
			t.Errorf("%s: %d members recorded, want %d", step.name, n, step.left)
		}
	}
}

// When its tenant frees a slot, the compartment's first waiter (highest
// class, then FIFO) joins the bulkhead's queue and takes the freed permit.
func TestCompartmentLetsInItsFirstWaiter(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	ctx := context.Background()
	s, tmpl := settings(2, 1, 5*time.Second), settings(1, 4, 5*time.Second)
	x, err := l.Acquire(ctx, tenantReq("orders", s, tmpl, "x", bulkhead.Normal))
	if err != nil {
		t.Fatal(err)
	}
	normal, _, _ := f.enqueue(l, tenantReq("orders", s, tmpl, "x", bulkhead.Normal))
	critical, _, _ := f.enqueue(l, tenantReq("orders", s, tmpl, "x", bulkhead.Critical))
	if _, res := l.ReleaseToken("orders", x, permit.AccessLog); res != permit.Released {
		t.Fatalf("release: %v", res)
	}
	if !f.granted("orders", critical) || f.granted("orders", normal) {
		t.Fatal("x's critical waiter was not let in first")
	}
	if inuse, qlen := f.counts("orders"); inuse != 1 || qlen != 0 {
		t.Fatalf("inuse %d, qlen %d; want 1, 0", inuse, qlen)
	}
}

// A compartment's waiter let in while the bulkhead's queue is full, with
// nobody of a lower class to shed, is refused queue_full, as in memory an
// arrival at a full queue is. Limit 2 with half reserved for critical:
// best effort may use 1.
func TestCompartmentWaiterFindsTheQueueFull(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	ctx := context.Background()
	s, tmpl := settings(2, 1, 5*time.Second), settings(1, 4, 5*time.Second)
	s.ReserveCritical = 0.5
	x, err := l.Acquire(ctx, tenantReq("orders", s, tmpl, "x", bulkhead.Critical))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, req("orders", s, bulkhead.Critical)); err != nil {
		t.Fatal(err)
	}
	waiter, _, _ := f.enqueue(l, tenantReq("orders", s, tmpl, "x", bulkhead.BestEffort))
	other, _, _ := f.enqueue(l, req("orders", s, bulkhead.BestEffort))
	if inuse, qlen := f.counts("orders"); inuse != 2 || qlen != 1 {
		t.Fatalf("inuse %d, qlen %d; want 2, 1", inuse, qlen)
	}
	wake := f.rdb.Subscribe(ctx, "test:wake:a")
	defer wake.Close()
	if _, err := wake.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if _, res := l.ReleaseToken("orders", x, permit.AccessLog); res != permit.Released {
		t.Fatalf("release: %v", res)
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if m, err := wake.ReceiveMessage(rctx); err != nil || m.Payload != "q"+waiter {
		t.Fatalf("wake-up %v %v, want x's waiter refused queue_full", m, err)
	}
	if !errors.Is(wakeQueueFull.rejection(), bulkhead.ErrQueueFull) {
		t.Fatal("a refusal is not queue_full")
	}
	if f.granted("orders", other) {
		t.Fatal("a best-effort waiter was granted past its ceiling")
	}
	if inuse, qlen := f.counts("orders"); inuse != 1 || qlen != 1 {
		t.Fatalf("inuse %d, qlen %d; want 1, 1", inuse, qlen)
	}
}
