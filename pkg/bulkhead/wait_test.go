package bulkhead

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestAcquireWaitsAndIsGranted(t *testing.T) {
	l := mustNew(t, Settings{MaxConcurrent: 1, MaxQueue: 1})
	p, err := l.Acquire(context.Background(), Normal)
	if err != nil {
		t.Fatal(err)
	}
	ch := acquireAsync(t, context.Background(), l, Normal)
	if got := l.Snapshot().Queued[Normal]; got != 1 {
		t.Fatalf("queued = %d, want 1", got)
	}
	p.Release()
	r := recv(t, ch)
	if r.err != nil || !r.p.Valid() {
		t.Fatalf("queued Acquire = %v, %v; want a permit", r.p, r.err)
	}
	if s := l.Snapshot(); s.InUse != 1 || s.QueuedTotal() != 0 {
		t.Fatalf("after grant: %+v", s)
	}
	r.p.Release()
}

func TestAcquireTimeout(t *testing.T) {
	fake := clock.NewFake(time.Unix(0, 0))
	l := mustNew(t, Settings{MaxConcurrent: 1, MaxQueue: 1, MaxWait: 500 * time.Millisecond}, WithClock(fake))
	p, _ := l.Acquire(context.Background(), Normal)
	defer p.Release()
	ch := acquireAsync(t, context.Background(), l, Normal)
	testkit.Eventually(t, "the condition", func() bool { return fake.Timers() == 1 })
	fake.Advance(499 * time.Millisecond)
	if len(ch) != 0 {
		t.Fatal("returned before max_wait")
	}
	fake.Advance(time.Millisecond)
	r := recv(t, ch)
	if !errors.Is(r.err, ErrTimeout) || ReasonOf(r.err) != ReasonTimeout || r.p.Valid() {
		t.Fatalf("got %v, %v; want ErrTimeout", r.p, r.err)
	}
	s := l.Snapshot()
	if s.Rejected[ReasonTimeout] != 1 || s.QueuedTotal() != 0 || s.InUse != 1 {
		t.Fatalf("after timeout: %+v", s)
	}
}

func TestAcquireContextEnds(t *testing.T) {
	l := mustNew(t, Settings{MaxConcurrent: 1, MaxQueue: 4})
	p, _ := l.Acquire(context.Background(), Normal)

	ctx, cancel := context.WithCancel(context.Background())
	ch := acquireAsync(t, ctx, l, Normal)
	cancel()
	if r := recv(t, ch); !errors.Is(r.err, context.Canceled) || r.p.Valid() {
		t.Fatalf("got %v, %v; want context.Canceled", r.p, r.err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer dcancel()
	if _, err := l.Acquire(dctx, Normal); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: got %v", err)
	}
	// An already-ended context never takes a permit, even when one is free.
	p.Release()
	if _, err := l.Acquire(ctx, Critical); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended ctx with free permit: got %v", err)
	}
	s := l.Snapshot()
	if s.InUse != 0 || s.QueuedTotal() != 0 || s.Cancelled != 3 {
		t.Fatalf("after cancels: in use %d queued %d cancelled %d", s.InUse, s.QueuedTotal(), s.Cancelled)
	}
}

// A grant that races with cancellation is given back before Acquire returns;
// one that races with max_wait is kept (it came in time).
func TestAbandonAfterGrant(t *testing.T) {
	for _, tc := range []struct {
		cause    error
		keep     bool
		inUseEnd int
	}{
		{context.Canceled, false, 0},
		{ErrTimeout, true, 1},
	} {
		t.Run(tc.cause.Error(), func(t *testing.T) {
			l := mustNew(t, Settings{MaxConcurrent: 1, MaxQueue: 1})
			_, first, _ := enqueue(l, Normal)
			w, _, _ := enqueue(l, Normal)
			first.Release() // grants w under the lock
			if !isDecided(w) {
				t.Fatal("waiter not granted")
			}
			p, err := l.abandon(w, tc.cause)
			if tc.keep != (err == nil && p.Valid()) {
				t.Fatalf("abandon(%v) = %v, %v", tc.cause, p, err)
			}
			if s := l.Snapshot(); s.InUse != tc.inUseEnd {
				t.Fatalf("in use %d, want %d", s.InUse, tc.inUseEnd)
			}
		})
	}
}

func TestShedWaiterGetsErrShed(t *testing.T) {
	l := mustNew(t, Settings{MaxConcurrent: 1, MaxQueue: 1})
	p, _ := l.Acquire(context.Background(), Normal)
	defer p.Release()
	ch := acquireAsync(t, context.Background(), l, BestEffort)
	ch2 := acquireAsync(t, context.Background(), l, Critical)
	r := recv(t, ch)
	if !errors.Is(r.err, ErrShed) || ReasonOf(r.err) != ReasonShed {
		t.Fatalf("shed waiter got %v", r.err)
	}
	l.Close()
	if r := recv(t, ch2); !errors.Is(r.err, ErrClosed) {
		t.Fatalf("waiter at close got %v", r.err)
	}
}

func TestDuplicateRelease(t *testing.T) {
	l := mustNew(t, Settings{MaxConcurrent: 2})
	p, _ := l.Acquire(context.Background(), Normal)
	if !p.Release() {
		t.Fatal("first release returned false")
	}
	q, _ := l.Acquire(context.Background(), Normal) // reuses the slot
	if p.Release() || p.Release() || (Permit{}).Release() {
		t.Fatal("a duplicate release returned true")
	}
	s := l.Snapshot()
	if s.InUse != 1 || s.DuplicateReleases != 2 || s.Released != 1 {
		t.Fatalf("in use %d duplicates %d released %d", s.InUse, s.DuplicateReleases, s.Released)
	}
	if !q.Release() {
		t.Fatal("the slot's new permit was disturbed by the duplicate")
	}
}

func TestTryAcquire(t *testing.T) {
	l := mustNew(t, Settings{MaxConcurrent: 1, MaxQueue: 5})
	p, err := l.TryAcquire(Normal)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(Critical); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("try at limit: %v", err)
	}
	if s := l.Snapshot(); s.QueuedTotal() != 0 {
		t.Fatal("TryAcquire queued")
	}
	p.Release()
	l.Close()
	if _, err := l.TryAcquire(Normal); !errors.Is(err, ErrClosed) {
		t.Fatalf("try on closed: %v", err)
	}
}

func TestResize(t *testing.T) {
	t.Run("grow wakes waiters at once", func(t *testing.T) {
		l := mustNew(t, Settings{MaxConcurrent: 1, MaxQueue: 3})
		p, _ := l.Acquire(context.Background(), Normal)
		defer p.Release()
		a := acquireAsync(t, context.Background(), l, Normal)
		b := acquireAsync(t, context.Background(), l, BestEffort)
		if err := l.Resize(Settings{MaxConcurrent: 3, MaxQueue: 3}); err != nil {
			t.Fatal(err)
		}
		ra, rb := recv(t, a), recv(t, b)
		if ra.err != nil || rb.err != nil {
			t.Fatalf("after grow: %v, %v", ra.err, rb.err)
		}
		ra.p.Release()
		rb.p.Release()
	})
	t.Run("shrink keeps permits and blocks new grants until drained", func(t *testing.T) {
		l := mustNew(t, Settings{MaxConcurrent: 3})
		var ps []Permit
		for range 3 {
			p, _ := l.Acquire(context.Background(), Normal)
			ps = append(ps, p)
		}
		if err := l.Resize(Settings{MaxConcurrent: 1}); err != nil {
			t.Fatal(err)
		}
		if s := l.Snapshot(); s.InUse != 3 {
			t.Fatalf("shrink revoked permits: in use %d", s.InUse)
		}
		ps[0].Release()
		ps[1].Release()
		if _, err := l.TryAcquire(Critical); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("granted above the new limit: %v", err)
		}
		ps[2].Release()
		p, err := l.TryAcquire(Normal)
		if err != nil {
			t.Fatalf("after drain: %v", err)
		}
		p.Release()
	})
	t.Run("a smaller queue sheds the lowest, youngest waiters", func(t *testing.T) {
		l := mustNew(t, Settings{MaxConcurrent: 1, MaxQueue: 4})
		_, p, _ := enqueue(l, Normal)
		defer p.Release()
		c, _, _ := enqueue(l, Critical)
		b1, _, _ := enqueue(l, BestEffort)
		n, _, _ := enqueue(l, Normal)
		b2, _, _ := enqueue(l, BestEffort)
		if err := l.Resize(Settings{MaxConcurrent: 1, MaxQueue: 1}); err != nil {
			t.Fatal(err)
		}
		for _, w := range []*waiter{b2, b1, n} {
			if !isDecided(w) || !errors.Is(w.err, ErrShed) {
				t.Fatalf("waiter %v not shed", w.prio)
			}
		}
		if isDecided(c) {
			t.Fatal("critical waiter shed")
		}
		if s := l.Snapshot(); s.Rejected[ReasonShed] != 3 || s.QueuedTotal() != 1 {
			t.Fatalf("after shrink: %+v", s)
		}
	})
	t.Run("invalid settings change nothing", func(t *testing.T) {
		l := mustNew(t, Settings{MaxConcurrent: 2})
		if err := l.Resize(Settings{MaxConcurrent: 0}); !errors.Is(err, ErrInvalidSettings) {
			t.Fatalf("Resize(invalid) = %v", err)
		}
		if l.Settings().MaxConcurrent != 2 {
			t.Fatal("invalid resize applied")
		}
	})
}

func TestCloseKeepsReleasing(t *testing.T) {
	l := mustNew(t, Settings{MaxConcurrent: 1})
	p, _ := l.Acquire(context.Background(), Normal)
	l.Close()
	l.Close()
	if _, err := l.Acquire(context.Background(), Critical); !errors.Is(err, ErrClosed) || ReasonOf(err) != ReasonUnknownBulkhead {
		t.Fatalf("Acquire after Close = %v", err)
	}
	if !p.Release() {
		t.Fatal("permit from before Close not released")
	}
	if s := l.Snapshot(); !s.Closed || s.InUse != 0 {
		t.Fatalf("after close: %+v", s)
	}
}

func TestAcquireBefore(t *testing.T) {
	fake := clock.NewFake(time.Unix(100, 0))
	l := mustNew(t, Settings{MaxConcurrent: 1, MaxQueue: 2, MaxWait: time.Second}, WithClock(fake))
	// A passed deadline still admits what needs no wait.
	p, err := l.AcquireBefore(context.Background(), Normal, fake.Now().Add(-time.Millisecond))
	if err != nil {
		t.Fatalf("free permit with passed deadline: %v", err)
	}
	// ...but never queues (and so sheds nobody).
	if _, err := l.AcquireBefore(context.Background(), Critical, fake.Now()); !errors.Is(err, ErrTimeout) {
		t.Fatalf("would-wait with passed deadline: %v", err)
	}
	// The deadline caps max_wait.
	ch := make(chan acquireResult, 1)
	go func() {
		pm, err := l.AcquireBefore(context.Background(), Normal, fake.Now().Add(200*time.Millisecond))
		ch <- acquireResult{pm, err}
	}()
	testkit.Eventually(t, "the condition", func() bool { return fake.Timers() == 1 })
	fake.Advance(200 * time.Millisecond)
	if r := recv(t, ch); !errors.Is(r.err, ErrTimeout) {
		t.Fatalf("deadline-capped wait: %v", r.err)
	}
	if s := l.Snapshot(); s.Rejected[ReasonTimeout] != 2 || s.QueuedTotal() != 0 {
		t.Fatalf("after deadlines: %+v", s)
	}
	p.Release()
}
