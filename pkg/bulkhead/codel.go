package bulkhead

import (
	"fmt"
	"time"
)

// QueueDiscipline says which waiter of a class a freed permit goes to.
type QueueDiscipline uint8

// The queue disciplines. Classes are always served highest first; the
// discipline orders waiters within a class.
const (
	// FIFO serves the oldest waiter first.
	FIFO QueueDiscipline = iota
	// CoDel serves the oldest first while the queue keeps up, and the newest
	// first (adaptive LIFO) while it is overloaded, when waiters also wait
	// at most CoDelTarget (see the package doc).
	CoDel
)

// Defaults of the CoDel settings (Settings.CoDelTarget, CoDelInterval).
const (
	DefaultCoDelTarget   = 5 * time.Millisecond
	DefaultCoDelInterval = 100 * time.Millisecond
)

var disciplineNames = [...]string{"fifo", "codel"}

// String returns the discipline's configuration name.
func (d QueueDiscipline) String() string {
	if int(d) < len(disciplineNames) {
		return disciplineNames[d]
	}
	return fmt.Sprintf("queue(%d)", uint8(d))
}

// ParseQueueDiscipline maps "fifo" or "codel" to its discipline.
func ParseQueueDiscipline(s string) (QueueDiscipline, error) {
	for i, n := range disciplineNames {
		if s == n {
			return QueueDiscipline(i), nil
		}
	}
	return FIFO, fmt.Errorf("unknown queue discipline %q (want fifo or codel)", s)
}

// codelStateLocked brings a CoDel limiter's overload state up to now and
// reports it. Not overloaded, the limiter turns overloaded once, for the
// interval, no arrival was admitted at once and no waiter was served within
// the target in FIFO order (okAt). Overloaded, it stays so until, for the
// interval, no arrival had to queue (queuedAt): a permit left idle for a
// moment, as dropping waiters early leaves one now and then, does not end
// an overload. Arrivals and grants call it (and snapshots read it with
// codelPeekLocked, which changes nothing). l.mu must be held.
func (l *Limiter) codelStateLocked(now time.Time) bool {
	l.overloaded, l.okAt = l.codelPeekLocked(now)
	return l.overloaded
}

// codelPeekLocked returns the overload state and okAt that
// codelStateLocked would set at now.
func (l *Limiter) codelPeekLocked(now time.Time) (overloaded bool, okAt time.Time) {
	iv := l.settings.CoDelInterval
	switch {
	case l.overloaded && now.Sub(l.queuedAt) >= iv:
		return false, now // the overload ends now
	case !l.overloaded && now.Sub(l.okAt) >= iv:
		return true, l.okAt
	}
	return l.overloaded, l.okAt
}

// codelAdmittedLocked notes that an arrival of a CoDel limiter was admitted
// at once: there was spare capacity. l.mu must be held.
func (l *Limiter) codelAdmittedLocked() {
	now := l.clock.Now()
	l.codelStateLocked(now)
	l.okAt = now
}

// codelBusyLocked notes that an arrival of a CoDel limiter found no permit
// at now (it will queue, or be rejected): it returns the arrival's wait
// bound, the target while the limiter is overloaded, else 0. l.mu must be
// held.
func (l *Limiter) codelBusyLocked(now time.Time) (bound time.Duration) {
	if l.codelStateLocked(now) {
		bound = l.settings.CoDelTarget
	}
	l.queuedAt = now
	return bound
}

// codelResetLocked starts a CoDel limiter not overloaded, at now.
func (l *Limiter) codelResetLocked(now time.Time) {
	l.okAt, l.queuedAt, l.overloaded = now, now, false
}

// codelPickLocked returns the waiter of class c that a freed permit goes
// to in a CoDel queue, or nil when it dropped them all. Overloaded, it first
// drops (ErrTimeout) the oldest waiters of c that have waited past the
// target, then serves the newest; otherwise the oldest, and a grant within
// the target shows the queue keeps up. l.mu must be held; c is not empty.
func (l *Limiter) codelPickLocked(c Priority) *waiter {
	now := l.clock.Now()
	q := &l.queues[c]
	if !l.codelStateLocked(now) {
		if now.Sub(q.head.enq) <= l.settings.CoDelTarget {
			l.okAt = now
		}
		return q.head
	}
	for q.head != nil && now.Sub(q.head.enq) > l.settings.CoDelTarget {
		l.rejectLocked(q.head, ErrTimeout)
	}
	return q.tail
}
