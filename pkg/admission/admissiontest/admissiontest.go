// Package admissiontest is the admission contract (admission.Ledger) as a
// test suite: call Run from a backend's tests with a constructor. Every
// backend runs it: the in-memory one in package admission, the Redis one
// in package redisledger, on a real redis-server.
//
// The suite runs on the real clock (a shared store keeps its leases on
// its own clock): its leases are short and it polls with deadlines.
package admissiontest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// Heartbeat is the lease contract every backend under test is built with.
var Heartbeat = permit.Heartbeat{Interval: 200 * time.Millisecond, TTL: 600 * time.Millisecond}

// Backend is a ledger under test and the bulkheads it admits from.
type Backend struct {
	Ledger    admission.Ledger
	Bulkheads *bulkhead.Registry
}

// New returns a running backend, built with Heartbeat, whose bulkheads are
// configured as given and whose adoption window is open. It stops when the
// test ends. Each call is a fresh ledger (a fresh store).
type New func(t *testing.T, bulkheads map[string]bulkhead.Settings) Backend

// Run runs the contract against backends made by newBackend.
func Run(t *testing.T, newBackend New) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, New)
	}{
		{"AdmitRelease", admitRelease},
		{"LimitHolds", limitHolds},
		{"PriorityCeilings", priorityCeilings},
		{"QueueGrantsOnRelease", queueGrantsOnRelease},
		{"WaitEndsAtDeadline", waitEndsAtDeadline},
		{"EndedContextHoldsNothing", endedContextHoldsNothing},
		{"TenantCompartments", tenantCompartments},
		{"RenewKeepsAlive", renewKeepsAlive},
		{"ExpiryReclaims", expiryReclaims},
		{"AdoptRunningRequest", adoptRunningRequest},
		{"LateEntryNotAdopted", lateEntryNotAdopted},
		{"UnknownBulkheadEntry", unknownBulkheadEntry},
		{"Holders", holders},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newBackend) })
	}
}

// request asks for a permit of bulkhead name in b with class p.
func request(t *testing.T, b Backend, name string, p bulkhead.Priority) admission.Request {
	t.Helper()
	l := b.Bulkheads.Get(name)
	if l == nil {
		t.Fatalf("bulkhead %q not configured", name)
	}
	return admission.Request{Bulkhead: l, Priority: p, Lease: 10 * time.Second, Node: "envoy-1"}
}

func admit(t *testing.T, b Backend, r admission.Request) string {
	t.Helper()
	a, err := b.Ledger.Admit(context.Background(), r)
	if err != nil || a.Token == "" || a.Unguarded {
		t.Fatalf("Admit(%s, %v) = %+v, %v; want a permit", r.Bulkhead.Name(), r.Priority, a, err)
	}
	return a.Token
}

func wantDenied(t *testing.T, b Backend, r admission.Request, reason bulkhead.Reason) {
	t.Helper()
	a, err := b.Ledger.Admit(context.Background(), r)
	if got := bulkhead.ReasonOf(err); got != reason {
		t.Fatalf("Admit(%s, %v) = %+v, %v (reason %v); want a denial, reason %v", r.Bulkhead.Name(), r.Priority, a, err, got, reason)
	}
}

// answer waits for the result of Release or Renew.
func answer(t *testing.T, call func(admission.Done)) (permit.Lease, permit.Result) {
	t.Helper()
	type res struct {
		lease permit.Lease
		r     permit.Result
	}
	ch := make(chan res, 2)
	call(admission.DoneFunc(func(l permit.Lease, r permit.Result) { ch <- res{l, r} }))
	select {
	case got := <-ch:
		select {
		case <-ch:
			t.Fatal("done called twice")
		case <-time.After(50 * time.Millisecond):
		}
		return got.lease, got.r
	case <-time.After(5 * time.Second):
		t.Fatal("done not called within 5s")
	}
	return permit.Lease{}, 0
}

func release(t *testing.T, b Backend, name, token string) (permit.Lease, permit.Result) {
	t.Helper()
	return answer(t, func(d admission.Done) { b.Ledger.Release(admission.Entry{Bulkhead: []byte(name), Token: token}, d) })
}

func renew(t *testing.T, b Backend, name, token string) (permit.Lease, permit.Result) {
	t.Helper()
	return answer(t, func(d admission.Done) {
		b.Ledger.Renew(admission.Entry{Bulkhead: []byte(name), Token: token, Node: "envoy-1"}, d)
	})
}

func wantResult(t *testing.T, what string, got, want permit.Result) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// wantUnknown checks the answer to an entry of a token the backend never
// issued: unknown, or forwarded by a backend whose replicas admit from
// capacity leases (one of them may have issued it).
func wantUnknown(t *testing.T, what string, got permit.Result) {
	t.Helper()
	if got != permit.Unknown && got != permit.Forwarded {
		t.Fatalf("%s = %v, want unknown (or forwarded)", what, got)
	}
}

func limit(n int) bulkhead.Settings { return bulkhead.Settings{MaxConcurrent: n} }

func admitRelease(t *testing.T, newBackend New) {
	b := newBackend(t, map[string]bulkhead.Settings{"catalog": limit(2)})
	tok := admit(t, b, request(t, b, "catalog", bulkhead.Normal))
	lease, res := release(t, b, "catalog", tok)
	wantResult(t, "release", res, permit.Released)
	if lease.Bulkhead != "catalog" || lease.Acquired.IsZero() {
		t.Fatalf("released lease %+v, want its bulkhead and acquisition time", lease)
	}
	_, res = release(t, b, "catalog", tok)
	wantResult(t, "second release", res, permit.Duplicate)
	_, res = release(t, b, "catalog", "AAAAAAAAAAAAAAAAAAAAAA")
	wantUnknown(t, "release of a token never issued", res)
	_, res = release(t, b, "catalog", "not a token")
	wantResult(t, "release of a malformed token", res, permit.Unknown)
}

func limitHolds(t *testing.T, newBackend New) {
	b := newBackend(t, map[string]bulkhead.Settings{"catalog": limit(2)})
	r := request(t, b, "catalog", bulkhead.Normal)
	first := admit(t, b, r)
	admit(t, b, r)
	wantDenied(t, b, r, bulkhead.ReasonQueueFull)
	_, res := release(t, b, "catalog", first)
	wantResult(t, "release", res, permit.Released)
	admit(t, b, r)
}

func priorityCeilings(t *testing.T, newBackend New) {
	// Critical may use the whole limit, normal up to 4-2, best_effort 4-2-1.
	b := newBackend(t, map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 4, ReserveCritical: 0.5, ReserveNormal: 0.25}})
	admit(t, b, request(t, b, "catalog", bulkhead.BestEffort))
	wantDenied(t, b, request(t, b, "catalog", bulkhead.BestEffort), bulkhead.ReasonQueueFull)
	admit(t, b, request(t, b, "catalog", bulkhead.Normal))
	wantDenied(t, b, request(t, b, "catalog", bulkhead.Normal), bulkhead.ReasonQueueFull)
	admit(t, b, request(t, b, "catalog", bulkhead.Critical))
	admit(t, b, request(t, b, "catalog", bulkhead.Critical))
	wantDenied(t, b, request(t, b, "catalog", bulkhead.Critical), bulkhead.ReasonQueueFull)
}

func queueGrantsOnRelease(t *testing.T, newBackend New) {
	b := newBackend(t, map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 1, MaxQueue: 1, MaxWait: 10 * time.Second}})
	r := request(t, b, "catalog", bulkhead.Normal)
	held := admit(t, b, r)
	type result struct {
		a   admission.Admitted
		err error
	}
	waiter := make(chan result, 1)
	go func() {
		a, err := b.Ledger.Admit(context.Background(), r)
		waiter <- result{a, err}
	}()
	eventually(t, "a waiter queued", func() bool { return queued(t, b, "catalog") })
	select {
	case got := <-waiter:
		t.Fatalf("the waiter was answered while the permit was held: %+v, %v", got.a, got.err)
	default:
	}
	_, res := release(t, b, "catalog", held)
	wantResult(t, "release", res, permit.Released)
	select {
	case got := <-waiter:
		if got.err != nil || got.a.Token == "" {
			t.Fatalf("the waiter got %+v, %v; want the permit released", got.a, got.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not granted the released permit within 5s")
	}
}

// queued reports whether bulkhead name has a waiter: a Check of another
// class than the held one's would be refused at once, so the suite asks the
// limiter's own count where it can, and otherwise waits a little.
func queued(t *testing.T, b Backend, name string) bool {
	t.Helper()
	if q, ok := b.Ledger.(interface{ Queued(string) int }); ok {
		return q.Queued(name) > 0
	}
	return b.Bulkheads.Get(name).Snapshot().Queued[bulkhead.Normal] > 0
}

func waitEndsAtDeadline(t *testing.T, newBackend New) {
	b := newBackend(t, map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 1, MaxQueue: 1, MaxWait: 10 * time.Second}})
	r := request(t, b, "catalog", bulkhead.Normal)
	admit(t, b, r)
	r.Deadline = time.Now().Add(200 * time.Millisecond)
	start := time.Now()
	wantDenied(t, b, r, bulkhead.ReasonTimeout)
	if waited := time.Since(start); waited > 3*time.Second {
		t.Fatalf("waited %v for a deadline 200ms away", waited)
	}
}

func endedContextHoldsNothing(t *testing.T, newBackend New) {
	b := newBackend(t, map[string]bulkhead.Settings{"catalog": limit(1)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a, err := b.Ledger.Admit(ctx, request(t, b, "catalog", bulkhead.Normal))
	if !errors.Is(err, context.Canceled) || a.Token != "" {
		t.Fatalf("Admit with an ended context = %+v, %v; want context.Canceled and no permit", a, err)
	}
	// Whatever it took went back: the one permit is free.
	admit(t, b, request(t, b, "catalog", bulkhead.Normal))
}

func tenantCompartments(t *testing.T, newBackend New) {
	b := newBackend(t, map[string]bulkhead.Settings{"catalog": limit(3)})
	tmpl := limit(1)
	if err := b.Bulkheads.SetTenants("catalog", &tmpl, 10); err != nil {
		t.Fatal(err)
	}
	ts := b.Bulkheads.Tenants("catalog")
	r := request(t, b, "catalog", bulkhead.Normal)
	r.Tenants, r.Tenant = ts, "acme"
	admit(t, b, r)
	wantDenied(t, b, r, bulkhead.ReasonQueueFull)
	r.Tenant = "globex"
	admit(t, b, r)
}

func renewKeepsAlive(t *testing.T, newBackend New) {
	b := newBackend(t, map[string]bulkhead.Settings{"catalog": limit(1)})
	r := request(t, b, "catalog", bulkhead.Normal)
	r.Lease = Heartbeat.TTL
	tok := admit(t, b, r)
	// Renewed each interval for four TTLs: never reclaimed.
	for end := time.Now().Add(4 * Heartbeat.TTL); time.Now().Before(end); {
		time.Sleep(Heartbeat.Interval) // the heartbeat's own cadence, not a synchronisation
		_, res := renew(t, b, "catalog", tok)
		wantResult(t, "renewal", res, permit.Renewed)
	}
	wantDenied(t, b, r, bulkhead.ReasonQueueFull)
	_, res := release(t, b, "catalog", tok)
	wantResult(t, "release after renewals", res, permit.Released)
}

func expiryReclaims(t *testing.T, newBackend New) {
	b := newBackend(t, map[string]bulkhead.Settings{"catalog": limit(1)})
	r := request(t, b, "catalog", bulkhead.Normal)
	r.Lease = 300 * time.Millisecond
	tok := admit(t, b, r)
	eventually(t, "the expired lease reclaimed", func() bool {
		a, err := b.Ledger.Admit(context.Background(), r)
		if err == nil {
			_, res := release(t, b, "catalog", a.Token)
			wantResult(t, "release", res, permit.Released)
		}
		return err == nil
	})
	_, res := release(t, b, "catalog", tok)
	wantResult(t, "release of a reclaimed permit", res, permit.Expired)
}

func adoptRunningRequest(t *testing.T, newBackend New) {
	b := newBackend(t, map[string]bulkhead.Settings{"catalog": limit(1)})
	// A request admitted by an earlier process (or replica set) still runs.
	tok, err := permit.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	lease, res := renew(t, b, "catalog", tok)
	wantResult(t, "renewal of a running request's unknown permit", res, permit.Adopted)
	if lease.Bulkhead != "catalog" {
		t.Fatalf("adopted lease %+v, want bulkhead catalog", lease)
	}
	wantDenied(t, b, request(t, b, "catalog", bulkhead.Critical), bulkhead.ReasonQueueFull)
	_, res = renew(t, b, "catalog", tok)
	wantResult(t, "renewal of the adopted permit", res, permit.Renewed)
	_, res = release(t, b, "catalog", tok)
	wantResult(t, "release of the adopted permit", res, permit.Released)
	admit(t, b, request(t, b, "catalog", bulkhead.Normal))
}

func lateEntryNotAdopted(t *testing.T, newBackend New) {
	b := newBackend(t, map[string]bulkhead.Settings{"catalog": limit(1)})
	// Released, then its last periodic entry (batched) comes late.
	tok := admit(t, b, request(t, b, "catalog", bulkhead.Normal))
	_, res := release(t, b, "catalog", tok)
	wantResult(t, "release", res, permit.Released)
	_, res = renew(t, b, "catalog", tok)
	wantResult(t, "late periodic entry", res, permit.Late)
	// A request unknown here ended; its late periodic entry adopts nothing.
	unknown, err := permit.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	_, res = release(t, b, "catalog", unknown)
	wantUnknown(t, "end entry of an unknown permit", res)
	_, res = renew(t, b, "catalog", unknown)
	wantResult(t, "its late periodic entry", res, permit.Late)
	admit(t, b, request(t, b, "catalog", bulkhead.Normal))
}

func unknownBulkheadEntry(t *testing.T, newBackend New) {
	b := newBackend(t, map[string]bulkhead.Settings{"catalog": limit(1)})
	tok, err := permit.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	_, res := renew(t, b, "no-such-bulkhead", tok)
	wantResult(t, "renewal naming no configured bulkhead", res, permit.Unknown)
	_, res = release(t, b, "no-such-bulkhead", tok)
	wantResult(t, "release naming no configured bulkhead", res, permit.Unknown)
}

func holders(t *testing.T, newBackend New) {
	b := newBackend(t, map[string]bulkhead.Settings{"catalog": limit(3), "orders": limit(1)})
	r := request(t, b, "catalog", bulkhead.Critical)
	first := admit(t, b, r)
	time.Sleep(5 * time.Millisecond) // distinct acquisition times, ms apart on any store's clock
	r.Node = "envoy-2"
	second := admit(t, b, r)
	admit(t, b, request(t, b, "orders", bulkhead.Normal))
	leases, n := b.Ledger.Holders("catalog", 10)
	if n != 2 || len(leases) != 2 {
		t.Fatalf("Holders = %d leases of %d, want 2 of 2", len(leases), n)
	}
	if leases[0].Token != first || leases[1].Token != second {
		t.Fatalf("Holders = %+v, want oldest first", leases)
	}
	if leases[0].Node != "envoy-1" || leases[1].Node != "envoy-2" || leases[0].Priority != bulkhead.Critical {
		t.Fatalf("Holders = %+v, want their nodes and class", leases)
	}
	if leases, n := b.Ledger.Holders("catalog", 1); n != 2 || len(leases) != 1 || leases[0].Token != first {
		t.Fatalf("Holders(max 1) = %+v of %d, want the oldest of 2", leases, n)
	}
}

// eventually polls cond until it holds, for at most 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
