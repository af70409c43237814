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

// setLocked installs s and its class ceilings (New, Resize, SetPaused):
// while paused every ceiling is 0, so that no one is admitted and the
// admission check stays one comparison. l.mu must be held, or l not yet
// shared.
func (l *Limiter) setLocked(s Settings) {
	if s.Queue == CoDel && l.settings.Queue != CoDel {
		l.codelResetLocked(l.clock.Now()) // overload is measured from now on
	}
	l.settings = s
	l.setDryRunLocked(s.DryRun)
	for _, p := range Priorities() {
		l.ceil[p] = s.Ceiling(p)
		if l.paused {
			l.ceil[p] = 0
		}
	}
}
