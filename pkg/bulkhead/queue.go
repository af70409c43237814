package bulkhead

import "time"

// waiter is one Acquire call that could not be admitted at once. Its fields
// other than ready are guarded by the Limiter's mu; ready is closed exactly
// once, under mu, when the waiter is decided: granted (permit set, err nil)
// or rejected while queued (err set: ErrShed or ErrClosed).
type waiter struct {
	prio   Priority
	ready  chan struct{}
	permit Permit
	err    error
	// enq is when the waiter queued (in any discipline: a resize to CoDel
	// reads it), and bound (if not 0) caps its wait: set in CoDel queues
	// only.
	enq   time.Time
	bound time.Duration

	prev, next *waiter
	queued     bool
}

// waitQueue is an intrusive FIFO list of waiters of one class: O(1) push,
// pop and removal from the middle (a cancelled waiter).
type waitQueue struct {
	head, tail *waiter
	n          int
}

func (q *waitQueue) pushBack(w *waiter) {
	w.prev, w.next = q.tail, nil
	if q.tail == nil {
		q.head = w
	} else {
		q.tail.next = w
	}
	q.tail = w
	w.queued = true
	q.n++
}

func (q *waitQueue) remove(w *waiter) {
	if !w.queued {
		return
	}
	if w.prev == nil {
		q.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		q.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	q.n--
}
