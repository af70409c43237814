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
// being rewritten.
func TestRegistryIsolationUnderConcurrency(t *testing.T) {
	r := NewRegistry()
	want := map[string]Settings{"slow": {MaxConcurrent: 1, MaxQueue: 64}}
	for i := range 20 {
		want[fmt.Sprint("b", i)] = Settings{MaxConcurrent: 4}
	}
	if _, err := r.Apply(want); err != nil {
		t.Fatal(err)
	}
	hold, _ := r.Get("slow").Acquire(context.Background(), Normal)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 16 { // waiters parked on the saturated bulkhead
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p, err := r.Get("slow").Acquire(ctx, Normal); err == nil {
				p.Release()
			}
		}()
	}
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 2000 {
				l := r.Get(fmt.Sprint("b", (i+j)%20))
				p, err := l.Acquire(context.Background(), Priority(j%3))
				if err != nil {
					t.Errorf("acquire on an idle bulkhead: %v", err)
					return
				}
				p.Release()
			}
		}()
	}
	for range 50 { // concurrent writers: resize every bulkhead back and forth
		if _, err := r.Apply(want); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
	hold.Release()
	for _, s := range r.Snapshots() {
		if s.InUse != 0 || s.QueuedTotal() != 0 {
			t.Fatalf("%s left in use %d queued %d", s.Name, s.InUse, s.QueuedTotal())
		}
	}
}
