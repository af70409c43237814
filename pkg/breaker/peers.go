package breaker

import "time"

// Share is what one replica of the daemon tells the others about a
// breaker, when several replicas enforce one limit (the Redis ledger):
// each sees the outcomes only of the access-log streams that reach it, so
// the mesh-wide window is the sum of every replica's own, and a state
// change at one replica is one at all.
type Share struct {
	// Calls and Failed are the replica's own closed-state window.
	Calls, Failed uint64
	// Entered is the state the replica's breaker last entered, At when (the
	// replica's wall clock); At is zero until its first change.
	Entered State
	At      time.Time
}

// Local returns b's own share: its window, without the peers', and its
// last state change. An operator Mode shares nothing (an empty window and
// no change): the override is this replica's.
func (b *Breaker) Local() Share {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mode != Auto {
		return Share{}
	}
	now := b.clock.Now()
	calls, failed := b.totals(now)
	sh := Share{Calls: calls, Failed: failed, Entered: b.state}
	if b.changed {
		sh.At = b.since
	}
	return sh
}

// Merge takes in what the other replicas share: peerCalls and peerFailed,
// the sum of their windows, count with b's own toward opening (replacing
// the last sum), and last, the newest state change among them, is adopted
// if it is newer than b's own (than its last closing, or, open or half-open, than its
// last opening): a peer's Open opens b (its OpenFor counted
// from the peer's time), a peer's Closed closes it with an empty window
// (the probes that closed it succeeded). A peer's HalfOpen is not adopted:
// every replica's breaker turns half-open by itself when OpenFor is up, and
// lets its own probes through. Under an operator Mode, Merge only keeps
// the peers' window.
func (b *Breaker) Merge(peerCalls, peerFailed uint64, last Share) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.peerCalls, b.peerFailed = peerCalls, peerFailed
	if b.mode != Auto {
		return
	}
	now := b.clock.Now()
	// Newer than what b knows: than its closing when closed, else than its
	// opening (it turns half-open by itself, whenever it is next asked: a
	// peer's closing after b's opening ends that opening).
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
