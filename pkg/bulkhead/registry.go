package bulkhead

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// Registry holds the bulkheads by key. Get is lock-free (an atomic load of
// an immutable map), so a slow or saturated bulkhead never delays another:
// the only shared state on the acquire/release path is each Limiter's own
// mutex. Writers (Apply, Remove) serialise on a registry mutex and publish a
// new map (copy on write); they are rare. Safe for concurrent use.
type Registry struct {
	opts []Option

	mu sync.Mutex // serialises writers
	m  atomic.Pointer[map[string]*Limiter]
}

// NewRegistry returns an empty registry whose limiters get opts.
func NewRegistry(opts ...Option) *Registry {
	r := &Registry{opts: opts}
	empty := map[string]*Limiter{}
	r.m.Store(&empty)
	return r
}

// Get returns the bulkhead named key, or nil.
func (r *Registry) Get(key string) *Limiter { return (*r.m.Load())[key] }

// Len returns the number of bulkheads.
func (r *Registry) Len() int { return len(*r.m.Load()) }

// Keys returns the bulkhead keys, sorted.
func (r *Registry) Keys() []string { return slices.Sorted(maps.Keys(*r.m.Load())) }

// Snapshots returns a snapshot of every bulkhead, sorted by key.
func (r *Registry) Snapshots() []Snapshot {
	m := *r.m.Load()
	out := make([]Snapshot, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k].Snapshot())
	}
	return out
}

// Changes says what Apply did.
type Changes struct {
	Added, Resized, Removed []string
}

// Apply makes the registry hold exactly the bulkheads in want: new keys are
// created, existing ones are resized in place (keeping their waiters and
// permits), and missing ones are closed and removed (their permits are still
// released normally). Every setting is validated first; if any is invalid
// nothing changes and the error names each bad key.
func (r *Registry) Apply(want map[string]Settings) (Changes, error) {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if err := want[k].Validate(); err != nil {
			errs = append(errs, fmt.Errorf("bulkhead %q: %w", k, err))
		}
	}
	if len(errs) > 0 {
		return Changes{}, errors.Join(errs...)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.m.Load()
	next := make(map[string]*Limiter, len(want))
	var ch Changes
	for _, k := range slices.Sorted(maps.Keys(want)) {
		s := want[k]
		if l, ok := old[k]; ok {
			if l.Settings() != s {
				_ = l.Resize(s) // validated above
				ch.Resized = append(ch.Resized, k)
			}
			next[k] = l
			continue
		}
		l, _ := New(k, s, r.opts...) // validated above
		next[k] = l
		ch.Added = append(ch.Added, k)
	}
	r.m.Store(&next)
	for _, k := range slices.Sorted(maps.Keys(old)) {
		if _, ok := next[k]; !ok {
			old[k].Close()
			ch.Removed = append(ch.Removed, k)
		}
	}
	return ch, nil
}
