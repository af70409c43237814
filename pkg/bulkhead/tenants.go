package bulkhead

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// ErrTooManyTenants is returned by Tenants.Get when the bulkhead already has
// its maximum of live tenants and none is idle. Its reason is queue_full:
// there is no room for another waiter's compartment.
var ErrTooManyTenants = &Rejection{ReasonQueueFull, "bulkhead: too many tenants"}

// Tenants is the set of per-tenant sub-bulkheads of one bulkhead: one
// Limiter per tenant value, made on first use from a template, so that one
// noisy tenant can fill only its own compartment. The number of live tenants
// is capped; beyond the cap the least recently used idle tenant (nothing in
// use, nothing queued) is evicted. Tenant values never become metric
// labels: Stats aggregates them. Safe for concurrent use; the lock is this
// bulkhead's own.
type Tenants struct {
	parent string
	clock  clock.Clock

	mu      sync.RWMutex
	tmpl    Settings
	max     int
	m       map[string]*tenant
	closed  bool
	evicted uint64
	gone    [numReasons]uint64 // rejections of evicted tenants
}

type tenant struct {
	l        *Limiter
	lastUsed atomic.Int64 // clock nanoseconds
}

// TenantStats aggregates a bulkhead's tenants.
type TenantStats struct {
	Live    int
	Max     int
	Evicted uint64
	// Rejected counts rejections at the tenant level (live and evicted
	// tenants), indexed by Reason.
	Rejected [numReasons]uint64
}

// NewTenants returns the tenant set of bulkhead parent.
func NewTenants(parent string, tmpl Settings, max int, opts ...Option) (*Tenants, error) {
	if err := tmpl.Validate(); err != nil {
		return nil, err
	}
	if max < 1 {
		return nil, errors.New("bulkhead: max tenants must be at least 1")
	}
	o := buildOptions(opts)
	return &Tenants{parent: parent, clock: o.clock, tmpl: tmpl, max: max, m: map[string]*tenant{}}, nil
}

// Get returns the limiter of tenant id, creating it from the template if
// needed. It returns ErrTooManyTenants when the cap is reached and no tenant
// is idle, and ErrClosed after Close. A limiter returned by Get may be
// evicted (closed) before the caller acquires from it, if it was idle: a
// caller that then gets ErrClosed should call Get again.
func (t *Tenants) Get(id string) (*Limiter, error) {
	now := t.clock.Now().UnixNano()
	t.mu.RLock()
	e, ok := t.m[id]
	closed := t.closed
	t.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if ok {
		e.lastUsed.Store(now)
		return e.l, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if e, ok := t.m[id]; ok {
		e.lastUsed.Store(now)
		return e.l, nil
	}
	if len(t.m) >= t.max && !t.evictIdleLocked() {
		return nil, ErrTooManyTenants
	}
	l, _ := New(t.parent+"/"+id, t.tmpl, WithClock(t.clock)) // template validated
	e = &tenant{l: l}
	e.lastUsed.Store(now)
	t.m[id] = e
	return l, nil
}

// evictIdleLocked closes and forgets the least recently used idle tenant.
// The idle check and the close are one step under the tenant limiter's lock
// (closeIfIdle), so a permit is never granted by an evicted limiter.
func (t *Tenants) evictIdleLocked() bool {
	for range 4 { // a candidate may turn busy between the scan and the close
		var victim string
		var oldest int64
		for id, e := range t.m {
			if used := e.lastUsed.Load(); victim == "" || used < oldest {
				if s := e.l.Snapshot(); s.InUse == 0 && s.QueuedTotal() == 0 {
					victim, oldest = id, used
				}
			}
		}
		if victim == "" {
			return false
		}
		if t.m[victim].l.closeIfIdle() {
			t.forgetLocked(victim)
			return true
		}
	}
	return false
}

func (t *Tenants) forgetLocked(victim string) {
	l := t.m[victim].l
	s := l.Snapshot()
	for r := range s.Rejected {
		t.gone[r] += s.Rejected[r]
	}
	t.evicted++
	delete(t.m, victim)
}

// Resize changes the template and the cap; live tenants are resized in
// place (keeping their waiters and permits). Excess tenants are evicted as
// they go idle.
func (t *Tenants) Resize(tmpl Settings, max int) error {
	if err := tmpl.Validate(); err != nil {
		return err
	}
	if max < 1 {
		return errors.New("bulkhead: max tenants must be at least 1")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tmpl, t.max = tmpl, max
	for _, e := range t.m {
		_ = e.l.Resize(tmpl)
	}
	for len(t.m) > t.max && t.evictIdleLocked() {
	}
	return nil
}

// Template returns the settings new tenants get.
func (t *Tenants) Template() Settings {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.tmpl
}

// Max returns the cap on live tenants.
func (t *Tenants) Max() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.max
}

// Stats aggregates the tenants' state.
func (t *Tenants) Stats() TenantStats {
	t.mu.RLock()
	defer t.mu.RUnlock()
	st := TenantStats{Live: len(t.m), Max: t.max, Evicted: t.evicted, Rejected: t.gone}
	for _, e := range t.m {
		s := e.l.Snapshot()
		for r := range s.Rejected {
			st.Rejected[r] += s.Rejected[r]
		}
	}
	return st
}

// Close closes every tenant limiter (their permits stay valid) and makes
// Get return ErrClosed.
func (t *Tenants) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, e := range t.m {
		e.l.Close()
	}
}
