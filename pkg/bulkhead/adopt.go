package bulkhead

// Adopt takes a permit for a call that is already running: its permit was
// granted by an earlier process (the daemon restarted) or reclaimed while
// the call still ran. The call is counted in use at once, even past the
// limit or during a pause, and never queued or rejected, since it already
// runs: like a shrink, the limiter then admits no one until enough permits
// come back. It is not counted as admitted. It fails only with ErrClosed.
func (l *Limiter) Adopt() (Permit, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return Permit{}, ErrClosed
	}
	l.stats.adopted++
	p := l.takeSlotLocked()
	if l.twin != nil {
		l.slots[p.slot].ghost = l.twin.adopt(l.clock.Now())
	}
	return p, nil
}

// SetPaused pauses admissions (true) or resumes them (false). A paused
// limiter admits no one: arrivals queue as if it were full (bounded by
// max_queue and max_wait, shedding as usual), adopted and released permits
// are counted, and resuming serves the queue in order. The daemon pauses
// its bulkheads for the recovery window after a start, while the running
// requests' periodic access logs tell it which permits are already in use.
func (l *Limiter) SetPaused(paused bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paused = paused
	l.setLocked(l.settings)
	if !paused {
		l.notifyLocked()
	}
}
