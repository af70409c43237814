package bulkhead

// Close stops admission: queued waiters and later Acquire calls get
// ErrClosed. Permits in use stay valid and are released as usual. Close is
// idempotent.
func (l *Limiter) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for c := range l.queues {
		for w := l.queues[c].head; w != nil; w = l.queues[c].head {
			l.rejectLocked(w, ErrClosed)
		}
	}
}

// closeIfIdle closes the limiter if nothing is in use or queued, in one step
// under its lock, and reports whether it did.
func (l *Limiter) closeIfIdle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inUse > 0 || l.queued > 0 {
		return false
	}
	l.closed = true
	return true
}
