package bulkhead

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

func TestTenants(t *testing.T) {
	fake := clock.NewFake(time.Unix(0, 0))
	ts, err := NewTenants("catalog", Settings{MaxConcurrent: 2}, 2, WithClock(fake))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ts.Get("a")
	if again, _ := ts.Get("a"); again != a {
		t.Fatal("Get made a second limiter for the same tenant")
	}
	pa, _ := a.Acquire(context.Background(), Normal)
	fake.Advance(time.Second)
	b, _ := ts.Get("b")
	pb, _ := b.Acquire(context.Background(), Normal)

	// Cap reached and both busy: a third tenant is refused.
	if _, err := ts.Get("c"); !errors.Is(err, ErrTooManyTenants) || ReasonOf(err) != ReasonQueueFull {
		t.Fatalf("third busy tenant: %v", err)
	}
	// b goes idle: it is evicted for c, and its limiter closed.
	pb.Release()
	fake.Advance(time.Second)
	c, err := ts.Get("c")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(context.Background(), Normal); !errors.Is(err, ErrClosed) {
		t.Fatalf("evicted tenant's limiter: %v", err)
	}
	if st := ts.Stats(); st.Live != 2 || st.Evicted != 1 {
		t.Fatalf("stats %+v", st)
	}
	// a's busy limiter survives and keeps its compartment.
	if again, _ := ts.Get("a"); again != a {
		t.Fatal("busy tenant was evicted")
	}
	a2, _ := a.Acquire(context.Background(), Normal)
	if _, err := a.TryAcquire(Normal); !errors.Is(err, ErrQueueFull) {
		t.Fatal("tenant exceeded its template limit")
	}
	// Resize applies to live tenants in place.
	if err := ts.Resize(Settings{MaxConcurrent: 3}, 2); err != nil {
		t.Fatal(err)
	}
	a3, err := a.TryAcquire(Normal)
	if err != nil {
		t.Fatalf("after resize: %v", err)
	}
	for _, p := range []Permit{pa, a2, a3} {
		p.Release()
	}
	if st := ts.Stats(); st.Rejected[ReasonQueueFull] != 1 {
		t.Fatalf("tenant rejections %v", st.Rejected)
	}
	ts.Close()
	if _, err := ts.Get("a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if _, err := c.TryAcquire(Normal); !errors.Is(err, ErrClosed) {
		t.Fatalf("tenant limiter after Close: %v", err)
	}
}

// Many goroutines hitting many tenant values past the cap: no tenant
// limiter ever grants above its template, evicted limiters grant nothing,
// and everything drains.
func TestTenantsConcurrentChurn(t *testing.T) {
	ts, _ := NewTenants("x", Settings{MaxConcurrent: 1}, 8)
	var mu sync.Mutex
	held := map[string]int{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				id := fmt.Sprint("t", (g*7+i)%24)
				var p Permit
				for range 3 { // an evicted limiter answers ErrClosed: get again
					l, err := ts.Get(id)
					if err != nil {
						break
					}
					if p, err = l.TryAcquire(Normal); !errors.Is(err, ErrClosed) {
						break
					}
				}
				if !p.Valid() {
					continue
				}
				mu.Lock()
				held[id]++
				if held[id] > 1 {
					t.Errorf("tenant %s holds %d permits over its limit 1", id, held[id])
				}
				mu.Unlock()
				mu.Lock()
				held[id]--
				mu.Unlock()
				p.Release()
			}
		}()
	}
	wg.Wait()
	if st := ts.Stats(); st.Live > 8 {
		t.Fatalf("%d live tenants over the cap 8", st.Live)
	}
}

func TestRegistryTenants(t *testing.T) {
	r := NewRegistry()
	if _, err := r.Apply(map[string]Settings{"catalog": {MaxConcurrent: 4}, "auth": {MaxConcurrent: 4}}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetTenants("catalog", &Settings{MaxConcurrent: 1}, 10); err != nil {
		t.Fatal(err)
	}
	if r.Tenants("catalog") == nil || r.Tenants("auth") != nil {
		t.Fatal("tenant sets not as set")
	}
	if err := r.SetTenants("catalog", &Settings{MaxConcurrent: 0}, 10); !errors.Is(err, ErrInvalidSettings) {
		t.Fatalf("invalid template: %v", err)
	}
	l, _ := r.Tenants("catalog").Get("acme")
	if _, err := l.TryAcquire(Normal); err != nil {
		t.Fatal(err)
	}
	snaps := r.Snapshots()
	if snaps[1].Name != "catalog" || snaps[1].Tenants == nil || snaps[1].Tenants.Live != 1 || snaps[0].Tenants != nil {
		t.Fatalf("snapshots: %+v", snaps)
	}
	if _, err := r.Apply(map[string]Settings{"auth": {MaxConcurrent: 4}}); err != nil {
		t.Fatal(err)
	}
	if r.Tenants("catalog") != nil {
		t.Fatal("tenants of a removed bulkhead survive")
	}
	if err := r.SetTenants("auth", nil, 1); err != nil || r.Tenants("auth") != nil {
		t.Fatalf("removing a template: %v", err)
	}
}
