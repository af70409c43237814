package bulkhead

import (
	"container/heap"
	"slices"
	"time"
)

// twin is the enforcing twin of a dry-run limiter: a discrete-event
// simulation of what the limiter would have done had it enforced its
// settings, driven by the real arrivals and ends. The real limiter admits
// every arrival at once; the twin decides each arrival as Acquire would
// (admit, queue, shed, queue_full), queues it virtually, grants it
// virtually when a virtual permit frees, and times it out at its deadline.
// A request the twin admits late holds its virtual permit for as long as the
// real request ran, from its virtual grant: its virtual end is its real end
// plus the delay it would have waited. Every reason the twin rejects is
// counted in counters.wouldReject.
//
// The twin runs lazily: events due up to now (virtual ends, deadlines) are
// processed in time order, before each arrival, end and snapshot. So its
// counts are exact for a trace whose events the twin sees in order, up to
// ties between events at the same instant (a virtual end is processed
// before a deadline at the same time). It is guarded by the limiter's mu.
// Its memory is bounded by the real permits in use, max_queue and the
// virtual permits in use.
type twin struct {
	inUse  int
	queues [numPriorities][]*ghost // virtual waiters of each class, oldest first
	queued int
	ends   endHeap // virtual ends still to come
}

// ghost is one request as the twin sees it. It is attached to its real
// permit's slot until the real request ends.
type ghost struct {
	prio     Priority
	arrived  time.Time
	deadline time.Time // zero: none
	granted  time.Time // zero: not (yet) granted virtually
	ended    time.Time // zero: the real request still runs
	rejected bool
}

// arrival is a real arrival as the twin decides it: of class p at now;
// wait bounds its virtual wait (0: none), and one that would queue is
// rejected with noWait instead when noWait is not ReasonNone.
type arrival struct {
	now    time.Time
	p      Priority
	wait   time.Duration
	noWait Reason
}

// arrive decides a the way the enforcing limiter would, under the class
// ceilings ceil and a queue of maxQueue, and returns its ghost. Rejections
// are counted in would.
func (t *twin) arrive(a arrival, ceil *[numPriorities]int, maxQueue int, would *[numReasons]uint64) *ghost {
	now, p, wait, noWait := a.now, a.p, a.wait, a.noWait
	t.advance(now, ceil, would)
	g := &ghost{prio: p, arrived: now}
	if wait > 0 {
		g.deadline = now.Add(wait)
	}
	if t.inUse < ceil[p] && !t.waitingUpTo(p) {
		t.inUse++
		g.granted = now
		return g
	}
	if noWait != ReasonNone {
		return t.reject(g, noWait, would)
	}
	if t.queued >= maxQueue {
		victim := t.youngestBelow(p)
		if victim == nil {
			return t.reject(g, ReasonQueueFull, would)
		}
		t.remove(victim)
		t.reject(victim, ReasonShed, would)
	}
	t.queues[p] = append(t.queues[p], g)
	t.queued++
	return g
}

// end records that g's real request ended at now.
func (t *twin) end(now time.Time, g *ghost, ceil *[numPriorities]int, would *[numReasons]uint64) {
	t.advance(now, ceil, would)
	g.ended = now
	if g.rejected || g.granted.IsZero() {
		return // rejected, or still waiting: a later grant schedules its end
	}
	t.scheduleEnd(g, now, ceil)
}

// scheduleEnd frees g's virtual permit at its virtual end, at once if that
// is now.
func (t *twin) scheduleEnd(g *ghost, now time.Time, ceil *[numPriorities]int) {
	at := g.granted.Add(g.ended.Sub(g.arrived))
	if at.After(now) {
		heap.Push(&t.ends, at)
		return
	}
	t.inUse--
	t.settle(now, ceil)
}

// advance processes the twin's events due at or before now, in time order.
func (t *twin) advance(now time.Time, ceil *[numPriorities]int, would *[numReasons]uint64) {
	for {
		g, deadline := t.earliestDeadline()
		if len(t.ends) > 0 && !t.ends[0].After(now) && (g == nil || !deadline.Before(t.ends[0])) {
			at := heap.Pop(&t.ends).(time.Time)
			t.inUse--
			t.settle(at, ceil)
			continue
		}
		if g == nil || deadline.After(now) {
			return
		}
		t.remove(g)
		t.reject(g, ReasonTimeout, would)
	}
}

// settle grants virtual waiters at time at, highest class first and oldest
// first within a class, while the head's class ceiling allows.
func (t *twin) settle(at time.Time, ceil *[numPriorities]int) {
	for t.queued > 0 {
		var head *ghost
		for c := range t.queues {
			if len(t.queues[c]) > 0 {
				head = t.queues[c][0]
				break
			}
		}
		if t.inUse >= ceil[head.prio] {
			return
		}
		t.remove(head)
		t.inUse++
		head.granted = at
		if !head.ended.IsZero() {
			t.scheduleEnd(head, at, ceil)
		}
	}
}

func (t *twin) reject(g *ghost, r Reason, would *[numReasons]uint64) *ghost {
	g.rejected = true
	would[r]++
	return g
}

// waitingUpTo reports whether a ghost of class p or higher is queued.
func (t *twin) waitingUpTo(p Priority) bool {
	for c := Critical; c <= p; c++ {
		if len(t.queues[c]) > 0 {
			return true
		}
	}
	return false
}

// youngestBelow returns the youngest ghost of the lowest queued class
// strictly below p, or nil.
func (t *twin) youngestBelow(p Priority) *ghost {
	for c := int(numPriorities) - 1; c > int(p); c-- {
		if q := t.queues[c]; len(q) > 0 {
			return q[len(q)-1]
		}
	}
	return nil
}

// earliestDeadline returns the queued ghost whose deadline comes first, or
// nil. It scans the queue: O(max_queue).
func (t *twin) earliestDeadline() (*ghost, time.Time) {
	var first *ghost
	for c := range t.queues {
		for _, g := range t.queues[c] {
			if !g.deadline.IsZero() && (first == nil || g.deadline.Before(first.deadline)) {
				first = g
			}
		}
	}
	if first == nil {
		return nil, time.Time{}
	}
	return first, first.deadline
}

func (t *twin) remove(g *ghost) {
	q := t.queues[g.prio]
	if i := slices.Index(q, g); i >= 0 {
		t.queues[g.prio] = slices.Delete(q, i, i+1)
		t.queued--
	}
}

// endHeap is a min-heap of virtual end times.
type endHeap []time.Time

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// admitDryLocked admits an arrival of class p to a dry-run limiter at once
// and lets the twin decide what the limiter would have done; see
// arrival for wait and noWait. l.mu must be held and l.twin set.
func (l *Limiter) admitDryLocked(p Priority, wait time.Duration, noWait Reason) Permit {
	if !p.Valid() {
		p = BestEffort
	}
	g := l.twin.arrive(arrival{now: l.clock.Now(), p: p, wait: wait, noWait: noWait}, &l.ceil, l.settings.MaxQueue, &l.stats.wouldReject)
	pm := l.grantLocked(p)
	l.slots[pm.slot].ghost = g
	return pm
}

// notifyDryLocked is notifyLocked of a dry-run limiter: the twin grants
// what its (new) ceilings allow, and real waiters, left from before the
// limiter turned dry-run, are all admitted.
func (l *Limiter) notifyDryLocked() {
	l.twin.settle(l.clock.Now(), &l.ceil)
	for c := range l.queues {
		for w := l.queues[c].head; w != nil; w = l.queues[c].head {
			l.queues[c].remove(w)
			l.queued--
			w.permit = l.admitDryLocked(w.prio, 0, ReasonNone)
			close(w.ready)
		}
	}
}

// setDryRunLocked starts or stops the twin as Settings.DryRun says. A twin
// starts with every permit in use granted virtually, now; a stopped twin's
// ghosts are dropped. l.mu must be held, or l not yet shared.
func (l *Limiter) setDryRunLocked(dry bool) {
	switch {
	case dry && l.twin == nil:
		l.twin = &twin{}
		now := l.clock.Now()
		for i := range l.slots {
			if l.slots[i].busy {
				l.slots[i].ghost = l.twin.adopt(now)
			}
		}
	case !dry && l.twin != nil:
		l.twin = nil
		for i := range l.slots {
			l.slots[i].ghost = nil
		}
	}
}

// adopt counts a request already running as virtually admitted at now.
func (t *twin) adopt(now time.Time) *ghost {
	t.inUse++
	return &ghost{prio: Critical, arrived: now, granted: now}
}
