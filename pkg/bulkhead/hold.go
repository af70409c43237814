package bulkhead

// Hold takes up to n permits that are grantable at once to class p, for
// capacity this limiter hands to someone who admits on its own: an Envoy's
// share (package shares), whose circuit breaker admits within it. It never
// waits and never jumps a queued waiter of class p or above; the permits
// are counted in use (and in the peak) but neither as admitted nor, when
// fewer than n are free, as rejected: a share that cannot grow is not a
// request refused. A dry-run limiter holds nothing (a share must enforce).
// Give each permit back with its Release.
func (l *Limiter) Hold(p Priority, n int) []Permit {
	if !p.Valid() {
		p = BestEffort
	}
	return l.hold(n, func() bool { return l.admissibleLocked(p) })
}

// HoldWithin is Hold for a share of class p whose ceiling the caller
// keeps: it takes permits while fewer than maxInUse are in use, up to the
// whole limit (class critical's ceiling), and never jumps a queued waiter
// of class p or above. The shares manager holds normal shares so, with
// maxInUse the normal ceiling plus the permits it holds for critical
// shares: then normal requests never hold more than their ceiling (the
// limit less the critical reserve), while a critical share's headroom
// sits in the reserve instead of counting against normal's ceiling as a
// critical request in flight does.
func (l *Limiter) HoldWithin(p Priority, n, maxInUse int) []Permit {
	if !p.Valid() {
		p = BestEffort
	}
	return l.hold(n, func() bool {
		return l.inUse < maxInUse && l.admissibleLocked(Critical) && !l.queuedUpToLocked(p)
	})
}

// hold takes up to n permits while admissible, called with l.mu held, says so.
func (l *Limiter) hold(n int, admissible func() bool) []Permit {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.twin != nil || n <= 0 {
		return nil
	}
	var out []Permit
	for len(out) < n && admissible() {
		out = append(out, l.takeSlotLocked())
	}
	return out
}

// queuedUpToLocked reports whether a waiter of class p or above is queued.
func (l *Limiter) queuedUpToLocked(p Priority) bool {
	for c := Critical; c <= p; c++ {
		if l.queues[c].n > 0 {
			return true
		}
	}
	return false
}
