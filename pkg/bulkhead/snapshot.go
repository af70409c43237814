package bulkhead

// Snapshot is a consistent copy of a limiter's state and counters, taken
// under its lock in O(1). Counters only grow. Admitted plus Adopted minus
// Released is always InUse (a permit given back by a cancelled waiter
// counts as both admitted and released).
type Snapshot struct {
	Name     string
	Settings Settings
	Closed   bool
	// Paused: admissions are paused (SetPaused).
	Paused bool
	InUse  int
	// Queued is indexed by Priority.
	Queued [numPriorities]int
	// Admitted counts grants, indexed by Priority.
	Admitted [numPriorities]uint64
	// Rejected counts rejections, indexed by Reason (ReasonNone stays 0).
	Rejected [numReasons]uint64
	// Adopted counts permits of running calls taken by Adopt.
	Adopted uint64
	// Cancelled counts Acquire calls that ended because their context did.
	Cancelled uint64
	// Released counts permits given back (including by cancelled waiters).
	Released uint64
	// DuplicateReleases counts releases of permits already released.
	DuplicateReleases uint64
	// Tenants aggregates the bulkhead's tenant sub-bulkheads; nil when it
	// has none (set by Registry.Snapshots only).
	Tenants *TenantStats
}

// QueuedTotal returns the number of waiters of every class.
func (s Snapshot) QueuedTotal() int {
	n := 0
	for _, q := range s.Queued {
		n += q
	}
	return n
}

// Snapshot returns the limiter's current state. It is cheap enough to call
// on every metrics scrape.
func (l *Limiter) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{
		Name:              l.name,
		Settings:          l.settings,
		Closed:            l.closed,
		Paused:            l.paused,
		Adopted:           l.stats.adopted,
		InUse:             l.inUse,
		Admitted:          l.stats.admitted,
		Rejected:          l.stats.rejected,
		Cancelled:         l.stats.cancelled,
		Released:          l.stats.released,
		DuplicateReleases: l.stats.duplicates,
	}
	for c := range l.queues {
		s.Queued[c] = l.queues[c].n
	}
	return s
}
