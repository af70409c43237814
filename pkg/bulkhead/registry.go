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

	mu      sync.Mutex // serialises writers
	paused  bool       // SetPaused; guarded by mu
	m       atomic.Pointer[map[string]*Limiter]
	tenants atomic.Pointer[map[string]*Tenants]
}

// NewRegistry returns an empty registry whose limiters get opts.
func NewRegistry(opts ...Option) *Registry {
	r := &Registry{opts: opts}
	empty := map[string]*Limiter{}
	r.m.Store(&empty)
	noTenants := map[string]*Tenants{}
	r.tenants.Store(&noTenants)
	return r
}

// Tenants returns the tenant sub-bulkheads of bulkhead key, or nil when it
// has no tenant template.
func (r *Registry) Tenants(key string) *Tenants { return (*r.tenants.Load())[key] }

// SetTenants gives bulkhead key a tenant template (creating its tenant set,
// or resizing the live tenants in place), or removes it when tmpl is nil.
// Tenant sets of keys that are no longer bulkheads are removed too.
func (r *Registry) SetTenants(key string, tmpl *Settings, max int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.tenants.Load()
	next := make(map[string]*Tenants, len(old)+1)
	bulkheads := *r.m.Load()
	for k, t := range old {
		if _, ok := bulkheads[k]; ok && k != key {
			next[k] = t
		} else if k != key {
			t.Close()
		}
	}
	cur := old[key]
	switch {
	case tmpl == nil:
		if cur != nil {
			cur.Close()
		}
	case cur != nil:
		if err := cur.Resize(*tmpl, max); err != nil {
			next[key] = cur
			r.tenants.Store(&next)
			return err
		}
		next[key] = cur
	default:
		t, err := NewTenants(key, *tmpl, max, r.opts...)
		if err != nil {
			r.tenants.Store(&next)
			return err
		}
		next[key] = t
	}
	r.tenants.Store(&next)
	return nil
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
	ts := *r.tenants.Load()
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s := m[k].Snapshot()
		if t := ts[k]; t != nil {
			st := t.Stats()
			s.Tenants = &st
		}
		out = append(out, s)
	}
	return out
}

// SetPaused pauses (or resumes) admissions of every bulkhead, including
// those Apply creates while paused (see Limiter.SetPaused). Tenant
// compartments are not paused: their bulkhead is.
func (r *Registry) SetPaused(paused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused = paused
	for _, l := range *r.m.Load() {
		l.SetPaused(paused)
	}
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
		if r.paused {
			l.SetPaused(true)
		}
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
	if len(ch.Removed) > 0 {
		ts := maps.Clone(*r.tenants.Load())
		for _, k := range ch.Removed {
			if t := ts[k]; t != nil {
				t.Close()
				delete(ts, k)
			}
		}
		r.tenants.Store(&ts)
	}
	return ch, nil
}
