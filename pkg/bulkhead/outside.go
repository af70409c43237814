package bulkhead

// RejectOutside counts a request refused before it reached the limiter,
// for reason r (a circuit breaker's ReasonCircuitOpen), and reports whether
// the limiter enforces its settings. A dry-run limiter counts it as a
// would-be rejection instead (Snapshot.WouldReject) and returns false: the
// caller lets the request go on to Acquire.
func (l *Limiter) RejectOutside(r Reason) (enforced bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.twin != nil {
		l.stats.wouldReject[r]++
		return false
	}
	l.stats.rejected[r]++
	return true
}
