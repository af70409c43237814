package bulkhead

import (
	"context"
	"testing"
	"time"
)

// TestHoldWithin: HoldWithin takes permits below its own cap, past the
// class's ceiling but never past the limit, and never ahead of a queued
// waiter of its class or above.
func TestHoldWithin(t *testing.T) {
	l := mustNew(t, Settings{MaxConcurrent: 10, MaxQueue: 4, MaxWait: time.Second, ReserveCritical: 0.3})
	crit := l.Hold(Critical, 3) // a critical share's headroom
	if len(crit) != 3 {
		t.Fatalf("Hold(critical, 3) took %d", len(crit))
	}
	if got := l.Hold(Normal, 10); len(got) != 4 {
		t.Fatalf("Hold(normal) beside 3 held for critical took %d, want 7 - 3 = 4 (the ceiling counts them)", len(got))
	} else {
		for _, p := range got {
			p.Release()
		}
	}
	normal := l.HoldWithin(Normal, 10, 7+3)
	if len(normal) != 7 {
		t.Fatalf("HoldWithin(normal, cap 7 + 3) took %d, want 7: the ceiling less nothing", len(normal))
	}
	if got := l.HoldWithin(Normal, 5, 100); len(got) != 0 {
		t.Fatalf("HoldWithin past the limit took %d", len(got))
	}
	for _, p := range normal[:2] {
		p.Release()
	}
	if _, err := l.TryAcquire(Normal); err == nil { // 8 in use: over normal's ceiling
		t.Fatal("a strict normal request admitted over the ceiling")
	}
	w, _, err := enqueue(l, Normal)
	if err != nil || w == nil {
		t.Fatalf("a normal request over the ceiling did not queue: %v", err)
	}
	if got := l.HoldWithin(Normal, 1, 100); len(got) != 0 {
		t.Fatalf("HoldWithin took %d ahead of a queued normal waiter", len(got))
	}
	if got := l.HoldWithin(BestEffort, 1, 100); len(got) != 0 {
		t.Fatalf("HoldWithin(best_effort) took %d ahead of a queued normal waiter", len(got))
	}
	if _, err := l.abandon(w, context.Canceled); err == nil {
		t.Fatal("the abandoned waiter holds a permit")
	}
	for _, p := range append(crit, normal[2:]...) {
		p.Release()
	}
	if in := l.Snapshot().InUse; in != 0 {
		t.Fatalf("%d in use after every permit came back", in)
	}
}
