package bulkhead

import (
	"errors"
	"testing"
)

func TestAdoptCountsPastTheLimit(t *testing.T) {
	l := mustNew(t, Settings{MaxConcurrent: 2, MaxQueue: 1})
	var held []Permit
	for range 3 {
		p, err := l.Adopt()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	s := l.Snapshot()
	if s.InUse != 3 || s.Adopted != 3 || s.Admitted != [numPriorities]uint64{} {
		t.Fatalf("after 3 adoptions at limit 2: %+v", s)
	}
	// Over the limit, a critical arrival queues like after a shrink.
	if w, _, err := enqueue(l, Critical); w == nil || err != nil {
		t.Fatalf("arrival over the limit: waiter %v, err %v; want queued", w, err)
	}
	held[0].Release()
	held[1].Release()
	if s := l.Snapshot(); s.InUse != 2 || s.QueuedTotal() != 0 {
		t.Fatalf("the waiter is granted only once in use < limit: %+v", s)
	}
	if s := l.Snapshot(); s.Admitted[Critical]+s.Adopted-s.Released != uint64(s.InUse) {
		t.Fatalf("admitted + adopted - released != in use: %+v", s)
	}
	l.Close()
	if _, err := l.Adopt(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Adopt after Close: %v", err)
	}
}

func TestPausedAdmitsNoOneUntilResumed(t *testing.T) {
	l := mustNew(t, Settings{MaxConcurrent: 2, MaxQueue: 2})
	l.SetPaused(true)
	if _, err := l.TryAcquire(Critical); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("TryAcquire while paused: %v", err)
	}
	wn, _, _ := enqueue(l, Normal)
	wc, _, _ := enqueue(l, Critical)
	if wn == nil || wc == nil {
		t.Fatal("arrivals while paused were not queued")
	}
	// The queue is bounded while paused: a best_effort arrival is refused,
	// a critical one sheds the normal waiter.
	if _, _, err := enqueue(l, BestEffort); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third arrival: %v, want queue full", err)
	}
	if w, _, _ := enqueue(l, Critical); w == nil || !isDecided(wn) || !errors.Is(wn.err, ErrShed) {
		t.Fatal("a critical arrival did not shed the normal waiter while paused")
	}
	adopted, _ := l.Adopt()
	if s := l.Snapshot(); !s.Paused || s.InUse != 1 || s.QueuedTotal() != 2 {
		t.Fatalf("paused with one adopted permit: %+v", s)
	}
	l.SetPaused(false)
	if !isDecided(wc) || wc.err != nil {
		t.Fatal("the first critical waiter was not granted on resume")
	}
	if s := l.Snapshot(); s.Paused || s.InUse != 2 || s.QueuedTotal() != 1 {
		t.Fatalf("after resume: %+v (the limit 2 holds with the adopted permit)", s)
	}
	adopted.Release()
	if s := l.Snapshot(); s.InUse != 2 || s.QueuedTotal() != 0 {
		t.Fatalf("after the adopted permit's release: %+v", s)
	}
}

func TestRegistryPausesNewBulkheads(t *testing.T) {
	r := NewRegistry()
	if _, err := r.Apply(map[string]Settings{"a": {MaxConcurrent: 1}}); err != nil {
		t.Fatal(err)
	}
	r.SetPaused(true)
	if _, err := r.Apply(map[string]Settings{"a": {MaxConcurrent: 1}, "b": {MaxConcurrent: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if !r.Get(k).Snapshot().Paused {
			t.Errorf("%s not paused", k)
		}
	}
	r.SetPaused(false)
	for _, k := range []string{"a", "b"} {
		if _, err := r.Get(k).TryAcquire(Normal); err != nil {
			t.Errorf("%s after resume: %v", k, err)
		}
	}
}
