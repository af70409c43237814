package bulkhead

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func codelSettings() Settings {
	return Settings{MaxConcurrent: 1, MaxQueue: 10, MaxWait: time.Second,
		Queue: CoDel, CoDelTarget: 10 * time.Millisecond, CoDelInterval: 50 * time.Millisecond}
}

// TestCoDelOverload: a queue that keeps waiters for the interval is
// overloaded: a freed permit drops the waiters past the target and goes to
// the newest, and new waiters wait at most the target, even when the queue
// empties or a permit idles for a moment. After an interval in which no
// arrival had to queue, it serves the oldest first again.
func TestCoDelOverload(t *testing.T) {
	fc := clock.NewFake(epoch)
	l := mustNew(t, codelSettings(), WithClock(fc))
	held, _ := l.TryAcquire(Normal)
	old, _, _ := enqueue(l, Normal) // the queue was empty: not overloaded
	if old.bound != 0 {
		t.Fatalf("first waiter bound %v, want none", old.bound)
	}
	fc.Advance(60 * time.Millisecond)
	mid, _, _ := enqueue(l, Normal)
	fc.Advance(2 * time.Millisecond)
	young, _, _ := enqueue(l, Normal)
	if mid.bound != 10*time.Millisecond || young.bound != 10*time.Millisecond {
		t.Fatalf("waiters of an overloaded queue bound %v, %v; want the target", mid.bound, young.bound)
	}
	if !l.Snapshot().Overloaded {
		t.Fatal("Snapshot: not overloaded")
	}
	held.Release()
	if !isDecided(old) || !errors.Is(old.err, ErrTimeout) {
		t.Fatalf("the waiter past the target: decided %v err %v, want dropped with ErrTimeout", isDecided(old), old.err)
	}
	if !isDecided(young) || young.err != nil || isDecided(mid) {
		t.Fatal("the newest waiter should be granted first, the middle one still wait")
	}
	young.permit.Release() // mid has waited 2ms: within the target, the newest
	if !isDecided(mid) || mid.err != nil {
		t.Fatalf("mid: decided %v err %v", isDecided(mid), mid.err)
	}
	// The queue is empty, but every permit is busy: still overloaded.
	a, _, _ := enqueue(l, Normal)
	if a.bound != 10*time.Millisecond {
		t.Fatalf("waiter of an empty queue with no spare permit: bound %v, want the target", a.bound)
	}
	mid.permit.Release()
	a.permit.Release()
	// A spare permit alone does not end the overload ...
	spare, _ := l.TryAcquire(Normal)
	if w, _, _ := enqueue(l, Normal); w.bound != 10*time.Millisecond {
		t.Fatalf("right after a spare permit: bound %v, want the target", w.bound)
	} else {
		spare.Release() // grants w
		w.permit.Release()
	}
	// ... an interval in which no one queued does: the next waiters are
	// served oldest first, with no bound.
	fc.Advance(50 * time.Millisecond)
	now, _ := l.TryAcquire(Normal)
	b, _, _ := enqueue(l, Normal)
	fc.Advance(time.Millisecond)
	c, _, _ := enqueue(l, Normal)
	now.Release()
	if !isDecided(b) || isDecided(c) || b.bound != 0 || c.bound != 0 {
		t.Fatal("after spare capacity, the oldest waiter should be served, with no bound")
	}
	b.permit.Release()
	c.permit.Release()
	if s := l.Snapshot(); s.InUse != 0 || s.Rejected[ReasonTimeout] != 1 {
		t.Fatalf("in use %d, timeouts %d", s.InUse, s.Rejected[ReasonTimeout])
	}
}

// TestCoDelPrioritiesFirst: overloaded, a freed permit still goes to the
// highest class waiting, newest first within it.
func TestCoDelPrioritiesFirst(t *testing.T) {
	fc := clock.NewFake(epoch)
	l := mustNew(t, codelSettings(), WithClock(fc))
	held, _ := l.TryAcquire(Normal)
	enqueue(l, BestEffort)
	fc.Advance(60 * time.Millisecond)
	c1, _, _ := enqueue(l, Critical)
	n1, _, _ := enqueue(l, Normal)
	c2, _, _ := enqueue(l, Critical)
	held.Release()
	if !isDecided(c2) || isDecided(c1) || isDecided(n1) {
		t.Fatal("want the newest critical waiter granted first")
	}
	c2.permit.Release()
	if !isDecided(c1) || isDecided(n1) {
		t.Fatal("want the other critical waiter next")
	}
	l.Close()
}

// TestCoDelWaitBound: an Acquire that queues in an overloaded CoDel queue
// times out at the target, not at max_wait.
func TestCoDelWaitBound(t *testing.T) {
	fc := clock.NewFake(epoch)
	l := mustNew(t, codelSettings(), WithClock(fc))
	held, _ := l.TryAcquire(Normal)
	first, _, _ := enqueue(l, Normal)
	fc.Advance(60 * time.Millisecond)
	ch := acquireAsync(t, context.Background(), l, Normal)
	testkit.Eventually(t, "the waiter's timer", func() bool { return fc.Timers() == 1 })
	fc.Advance(10 * time.Millisecond)
	if r := recv(t, ch); !errors.Is(r.err, ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout at the target", r.err)
	}
	held.Release() // first has waited 70ms: past the target, dropped
	if !errors.Is(first.err, ErrTimeout) {
		t.Fatalf("first: %v", first.err)
	}
}

func TestCoDelSettings(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    Settings
		ok   bool
	}{
		{"codel", codelSettings(), true},
		{"no target", Settings{MaxConcurrent: 1, Queue: CoDel, CoDelInterval: time.Second}, false},
		{"target above interval", Settings{MaxConcurrent: 1, Queue: CoDel, CoDelTarget: time.Second, CoDelInterval: time.Second}, false},
		{"codel settings with fifo", Settings{MaxConcurrent: 1, CoDelTarget: time.Millisecond}, false},
		{"unknown discipline", Settings{MaxConcurrent: 1, Queue: 9}, false},
	} {
		if err := tt.s.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v", tt.name, err)
		}
	}
	for _, s := range []string{"fifo", "codel"} {
		if d, err := ParseQueueDiscipline(s); err != nil || d.String() != s {
			t.Errorf("ParseQueueDiscipline(%q) = %v, %v", s, d, err)
		}
	}
	if _, err := ParseQueueDiscipline("lifo"); err == nil {
		t.Error("lifo parsed")
	}
}
