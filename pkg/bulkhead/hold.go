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
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.twin != nil || n <= 0 {
		return nil
	}
	var out []Permit
	for len(out) < n && l.admissibleLocked(p) {
		out = append(out, l.takeSlotLocked())
	}
	return out
}
