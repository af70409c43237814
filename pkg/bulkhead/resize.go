package bulkhead

// Resize changes the limiter's settings at run time. Growing the limit (or
// shrinking a reserve) grants queued waiters at once; shrinking never
// revokes permits in use, it only stops new grants until in-use falls below
// the new ceilings. A smaller queue sheds the youngest waiters of the lowest
// classes (ErrShed) until it fits. A new max_wait applies to waits that start
// after Resize. Invalid settings are refused and change nothing.
func (l *Limiter) Resize(s Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setLocked(s)
	l.notifyLocked() // grant first: waiters a larger limit admits are not shed
	for l.queued > s.MaxQueue {
		l.rejectLocked(l.youngestFromLocked(Critical), ErrShed)
	}
	return nil
}

// Settings returns the current settings.
func (l *Limiter) Settings() Settings {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.settings
}

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

func (l *Limiter) setLocked(s Settings) {
	l.settings = s
	for _, p := range Priorities() {
		l.ceil[p] = s.Ceiling(p)
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
