package redisledger

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// The ledger keeps each bulkhead's global counts as its last look at Redis
// found them, for the metrics, the admin API and sizing to read.
func TestGlobalIsTheLastLook(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	l := f.idle() // no ticker: only the test's looks
	ctx := context.Background()
	if g, ok := l.Global("orders"); ok {
		t.Fatalf("Global before any look = %+v, true; want false", g)
	}
	s := settings(1, 1, 5*time.Second)
	holder, err := l.Acquire(ctx, req("orders", s, bulkhead.Normal))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Global("orders"); ok {
		t.Fatal("Global known before a look")
	}
	waiter := acquireAsync(l, req("orders", s, bulkhead.Critical))
	f.queued("orders", 1)
	l.look(ctx, "orders")
	want := admission.Global{InUse: 1}
	want.Queued[bulkhead.Critical] = 1
	if g, ok := l.Global("orders"); !ok || g != want {
		t.Fatalf("Global with one holder and one waiter = %+v, %v; want %+v", g, ok, want)
	}

	if _, res := l.ReleaseToken("orders", holder, permit.AccessLog); res != permit.Released {
		t.Fatalf("release: %v", res)
	}
	r := <-waiter
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if g, _ := l.Global("orders"); g != want {
		t.Fatalf("Global changed without a look: %+v", g)
	}
	l.look(ctx, "orders")
	if g, ok := l.Global("orders"); !ok || g != (admission.Global{InUse: 1}) {
		t.Fatalf("Global after the waiter was granted = %+v, %v; want 1 in use, none queued", g, ok)
	}
	if _, res := l.ReleaseToken("orders", r.token, permit.AccessLog); res != permit.Released {
		t.Fatalf("release: %v", res)
	}
}
