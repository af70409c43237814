package breaker

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// Set holds the breakers of the bulkheads that configure one, by bulkhead
// name. Reads are lock-free (a copied map behind an atomic pointer); Apply
// and SetMode serialise on a mutex.
type Set struct {
	clock clock.Clock
	mu    sync.Mutex // writers
	m     atomic.Pointer[map[string]*Breaker]
}

// NewSet returns an empty set whose breakers use clock c.
func NewSet(c clock.Clock) *Set {
	s := &Set{clock: c}
	s.m.Store(&map[string]*Breaker{})
	return s
}

// Get returns the breaker of bulkhead name, or nil when it has none.
func (s *Set) Get(name string) *Breaker { return (*s.m.Load())[name] }

// Allow is Breaker.Allow for bulkhead name; a bulkhead without a breaker
// is always allowed.
func (s *Set) Allow(name string) (bool, time.Duration) {
	if b := s.Get(name); b != nil {
		return b.Allow()
	}
	return true, 0
}

// Record is Breaker.Record for bulkhead name; without a breaker it does
// nothing.
func (s *Set) Record(name string, failed bool, d time.Duration) {
	if b := s.Get(name); b != nil {
		b.Record(failed, d)
	}
}

// Ended records how a request of bulkhead name ended, as the access log
// reports it: a Failure fails, a Success succeeds (or fails as a slow call,
// by held), and an Aborted request (the client went away) says nothing of
// the upstream and is not recorded.
func (s *Set) Ended(name string, o bulkhead.Outcome, held time.Duration) {
	if o == bulkhead.Aborted {
		return
	}
	s.Record(name, o == bulkhead.Failure, held)
}

// Apply makes the set hold a breaker for each name in want, with its
// settings: new ones start closed, kept ones keep their state and mode, and
// the others go.
func (s *Set) Apply(want map[string]Settings) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.m.Load()
	next := make(map[string]*Breaker, len(want))
	for name, st := range want {
		if b, ok := old[name]; ok {
			b.Resize(st)
			next[name] = b
			continue
		}
		next[name] = New(st, s.clock)
	}
	s.m.Store(&next)
}

// Each calls f with every breaker and its bulkhead's name, in no order.
func (s *Set) Each(f func(name string, b *Breaker)) {
	for name, b := range *s.m.Load() {
		f(name, b)
	}
}

// Named is a breaker's snapshot with its bulkhead's name.
type Named struct {
	Name string
	Snapshot
}

// States returns every breaker's snapshot, by name.
func (s *Set) States() []Named {
	m := *s.m.Load()
	out := make([]Named, 0, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		out = append(out, Named{Name: name, Snapshot: m[name].Snapshot()})
	}
	return out
}
