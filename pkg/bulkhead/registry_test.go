package bulkhead

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestRegistryApply(t *testing.T) {
	r := NewRegistry()
	ch, err := r.Apply(map[string]Settings{"catalog": {MaxConcurrent: 2}, "auth": {MaxConcurrent: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.Added, []string{"auth", "catalog"}) || len(ch.Resized)+len(ch.Removed) != 0 {
		t.Fatalf("first apply: %+v", ch)
	}
	catalog := r.Get("catalog")
	p, _ := catalog.Acquire(context.Background(), Normal)

	ch, err = r.Apply(map[string]Settings{"catalog": {MaxConcurrent: 3}, "orders": {MaxConcurrent: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.Added, []string{"orders"}) || !slices.Equal(ch.Resized, []string{"catalog"}) ||
		!slices.Equal(ch.Removed, []string{"auth"}) {
		t.Fatalf("second apply: %+v", ch)
	}
	if r.Get("catalog") != catalog {
		t.Fatal("resize replaced the limiter (waiters and permits would be lost)")
	}
	if s := catalog.Snapshot(); s.InUse != 1 || s.Settings.MaxConcurrent != 3 {
		t.Fatalf("catalog after resize: %+v", s)
	}
	if r.Get("auth") != nil || !slices.Equal(r.Keys(), []string{"catalog", "orders"}) {
		t.Fatalf("keys = %v", r.Keys())
	}

	// An invalid config changes nothing and names every bad key.
	_, err = r.Apply(map[string]Settings{"catalog": {MaxConcurrent: 0}, "orders": {MaxQueue: -1}})
	if !errors.Is(err, ErrInvalidSettings) || !containsAll(err.Error(), `"catalog"`, `"orders"`) {
		t.Fatalf("invalid apply: %v", err)
	}
	if r.Get("catalog").Settings().MaxConcurrent != 3 || r.Len() != 2 {
		t.Fatal("invalid apply changed the registry")
	}
	p.Release()
	snaps := r.Snapshots()
	if len(snaps) != 2 || snaps[0].Name != "catalog" || snaps[0].InUse != 0 {
		t.Fatalf("snapshots: %+v", snaps)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// A bulkhead whose permits are all held, with a queue of waiters, does not
// delay acquire/release on another bulkhead, even while the registry is
// being rewritten. The outcome is the same under every interleaving: the
// waiters are queued before the workers start, and each idle bulkhead's
// limit is the number of workers, so that no schedule can fill one; an
// Acquire there (no queue: it never waits) is rejected only if work
// elsewhere leaked into it.
func TestRegistryIsolationUnderConcurrency(t *testing.T) {
	const workers, idle, waiters = 8, 20, 16
	r := NewRegistry()
	// Two configurations the writers switch between: every idle bulkhead
	// is resized, never below one permit per worker.
	configs := [2]map[string]Settings{}
	for c := range configs {
		configs[c] = map[string]Settings{"slow": {MaxConcurrent: 1, MaxQueue: 64}}
		for i := range idle {
			configs[c][fmt.Sprint("b", i)] = Settings{MaxConcurrent: workers * (c + 1)}
		}
	}
	if _, err := r.Apply(configs[0]); err != nil {
		t.Fatal(err)
	}
	slow := r.Get("slow")
	hold, err := slow.Acquire(context.Background(), Normal)
	if err != nil {
		t.Fatal(err)
	}
	parked := make([]*waiter, waiters) // queued on the saturated bulkhead
	for i := range parked {
		if parked[i], _, err = enqueue(slow, Normal); parked[i] == nil || err != nil {
			t.Fatalf("waiter %d not queued: %v", i, err)
		}
	}

	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 2000 {
				l := r.Get(fmt.Sprint("b", (i+j)%idle))
				p, err := l.Acquire(context.Background(), Priority(j%3))
				if err != nil {
					t.Errorf("acquire on an idle bulkhead: %v", err)
					return
				}
				p.Release()
			}
		}()
	}
	for k := range 50 { // concurrent writer: resize every idle bulkhead back and forth
		if _, err := r.Apply(configs[k%2]); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()

	if s := slow.Snapshot(); s.InUse != 1 || s.QueuedTotal() != waiters {
		t.Fatalf("the saturated bulkhead changed: in use %d, queued %d", s.InUse, s.QueuedTotal())
	}
	for i, w := range parked {
		if _, err := slow.abandon(w, context.Canceled); !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter %d: %v, want still waiting until cancelled", i, err)
		}
	}
	hold.Release()
	for _, s := range r.Snapshots() {
		if s.InUse != 0 || s.QueuedTotal() != 0 {
			t.Fatalf("%s left in use %d queued %d", s.Name, s.InUse, s.QueuedTotal())
		}
	}
}
