package breaker

import "time"

// Share is what one replica of the daemon tells the others about a
// breaker, when several replicas enforce one limit (the Redis ledger):
// each sees the outcomes only of the access-log streams that reach it, so
// the mesh-wide window is the sum of every replica's own, a state change
// at one replica is one at all, and so is an operator's mode.
type Share struct {
	// Calls and Failed are the replica's own closed-state window (zero
	// under an operator mode).
	Calls, Failed uint64
	// Entered is the state the replica's breaker last entered, At when (the
	// replica's wall clock); At is zero until its first change, and under
	// an operator mode.
	Entered State
	At      time.Time
	// Mode is the replica's operator mode, ModeAt when an operator set it
	// (zero: never).
	Mode   Mode
	ModeAt time.Time
}

// Local returns b's own share: its window, without the peers', its last
// state change and its mode.
func (b *Breaker) Local() Share {
	b.mu.Lock()
	defer b.mu.Unlock()
	sh := Share{Mode: b.mode, ModeAt: b.modeAt}
	if b.mode != Auto {
		return sh
	}
	sh.Calls, sh.Failed = b.totals(b.clock.Now())
	sh.Entered = b.state
	if b.changed {
		sh.At = b.since
	}
	return sh
}

// Merge takes in the other replicas' shares (of the replicas still
// writing):
//
//   - The newest operator mode among them, if newer than b's own, is
//     adopted: an operator's bulkheadctl circuit at one replica holds at
//     every one.
//   - Their windows, summed, count with b's own toward opening (replacing
//     the last sum).
//   - The newest state change among them is adopted if it is newer than
//     what b knows (than its last closing when closed; open or half-open,
//     than its last opening): a peer's Open opens b, its OpenFor counted
//     from the peer's time; a peer's Closed closes it with an empty window
//     (the probes that closed it succeeded). A peer's HalfOpen is not
//     adopted: every replica's breaker turns half-open by itself when
//     OpenFor is up, and lets its own probes through.
func (b *Breaker) Merge(peers []Share) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var calls, failed uint64
	var last, mode Share
	for _, p := range peers {
		calls, failed = calls+p.Calls, failed+p.Failed
		if (p.Entered == Open || p.Entered == Closed) && p.At.After(last.At) {
			last = p
		}
		if p.ModeAt.After(mode.ModeAt) {
			mode = p
		}
	}
	now := b.clock.Now()
	if mode.ModeAt.After(b.modeAt) {
		b.setMode(mode.Mode, mode.ModeAt, now)
	}
	b.peerCalls, b.peerFailed = calls, failed
	if b.mode != Auto {
		return
	}
	ref := b.since
	if b.state != Closed {
		ref = b.openedAt
	}
	newer := !last.At.IsZero() && (!b.changed || last.At.After(ref))
	switch {
	case newer && last.Entered == Open && !last.At.After(now.Add(b.s.OpenFor)):
		b.enterAt(Open, last.At)
		return
	case newer && last.Entered == Closed && b.state != Closed:
		b.enterAt(Closed, last.At)
		return
	}
	if b.state == Closed {
		b.checkOpen(now)
	}
}

// checkOpen opens a closed breaker whose window, its own and its peers',
// crossed the threshold. b.mu must be held.
func (b *Breaker) checkOpen(now time.Time) {
	calls, fails := b.totals(now)
	calls, fails = calls+b.peerCalls, fails+b.peerFailed
	if calls >= uint64(b.s.MinRequests) && float64(fails) >= b.s.FailureRatio*float64(calls) {
		b.enter(Open, now)
	}
}
