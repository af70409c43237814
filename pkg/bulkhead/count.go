package bulkhead

// Count counts a decision about this bulkhead that another ledger took
// (the Redis ledger: many replicas, one limit): an admission of class p when r is
// ReasonNone, else a rejection for r; cancelled counts a Check that ended
// while it waited. The limiter's own state is untouched, so that Snapshot's
// counters cover every decision this replica served, whoever took it.
func (l *Limiter) Count(p Priority, r Reason, cancelled bool) {
	if !p.Valid() {
		p = BestEffort
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case cancelled:
		l.stats.cancelled++
	case r == ReasonNone:
		l.stats.admitted[p]++
	case int(r) < numReasons:
		l.stats.rejected[r]++
	}
}
