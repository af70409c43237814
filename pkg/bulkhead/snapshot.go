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
	// WouldReject counts, indexed by Reason, the requests a dry-run limiter
	// (Settings.DryRun) admitted that it would have rejected had it enforced
	// its settings. It stays 0 while the limiter enforces them.
	WouldReject [numReasons]uint64
	// WouldQueue is how many admitted requests of a dry-run limiter would be
	// waiting now had it enforced its settings.
	WouldQueue int
	// Overloaded: the limiter's CoDel queue is overloaded (it serves the
	// newest first and drops waiters past the target); false with FIFO.
	Overloaded bool
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
// on every metrics scrape (a dry-run limiter first runs its twin's events
// due by now, in O(max_queue) each).
func (l *Limiter) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.twin != nil {
		l.twin.advance(l.clock.Now(), &l.ceil, &l.stats.wouldReject)
	}
	s := Snapshot{
		Name:              l.name,
		Settings:          l.settings,
		Closed:            l.closed,
		Paused:            l.paused,
		Adopted:           l.stats.adopted,
		InUse:             l.inUse,
		Admitted:          l.stats.admitted,
		Rejected:          l.stats.rejected,
		WouldReject:       l.stats.wouldReject,
		Cancelled:         l.stats.cancelled,
		Released:          l.stats.released,
		DuplicateReleases: l.stats.duplicates,
	}
	for c := range l.queues {
		s.Queued[c] = l.queues[c].n
	}
	if l.twin != nil {
		s.WouldQueue = l.twin.queued
	}
	if l.settings.Queue == CoDel {
		s.Overloaded, _ = l.codelPeekLocked(l.clock.Now())
	}
	return s
}
