package bulkhead

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// Limiter is one bulkhead: a counting semaphore with priority classes,
// reserves, a bounded wait queue with shedding, and resize. Safe for
// concurrent use. Create it with New.
type Limiter struct {
	name  string
	clock clock.Clock

	mu       sync.Mutex
	settings Settings
	ceil     [numPriorities]int // Settings.Ceiling per class, cached
	inUse    int
	queues   [numPriorities]waitQueue
	queued   int
	closed   bool
	paused   bool     // SetPaused: admit no one (every ceil is 0)
	slots    []slot   // one per permit ever held at once; see Permit
	free     []uint32 // indices of slots not in use
	stats    counters
	peak     int   // most permits in use since TakePeak
	twin     *twin // the enforcing twin while Settings.DryRun; else nil
	// A CoDel limiter's overload state (codel.go): okAt is when it last
	// admitted an arrival at once or served a waiter within the target in
	// FIFO order, queuedAt when an arrival last queued.
	okAt, queuedAt time.Time
	overloaded     bool
}

// slot tracks one permit so that a second release of it can be told apart
// from the first: the generation moves on every release.
type slot struct {
	gen   uint32
	busy  bool
	ghost *ghost // the permit's request as the dry-run twin sees it, or nil
}

type counters struct {
	admitted   [numPriorities]uint64
	rejected   [numReasons]uint64
	cancelled  uint64
	adopted    uint64
	released   uint64
	duplicates uint64
	// wouldReject counts, by reason, what a dry-run limiter admitted and
	// its enforcing twin would have rejected.
	wouldReject [numReasons]uint64
}

// Permit is the right to one unit of a Limiter's capacity. It is a small
// value (no allocation); copies name the same permit. The zero Permit is
// invalid and releasing it is a no-op.
type Permit struct {
	l    *Limiter
	slot uint32
	gen  uint32
}

// Release gives the permit back and reports whether it did. Releasing a
// permit a second time (or the zero Permit) does nothing, is counted as a
// duplicate release, and returns false.
func (p Permit) Release() bool {
	if p.l == nil {
		return false
	}
	return p.l.release(p)
}

// Valid reports whether p was granted by a Limiter (released or not).
func (p Permit) Valid() bool { return p.l != nil }

// Limiter returns the limiter that granted p, or nil for the zero Permit.
func (p Permit) Limiter() *Limiter { return p.l }

// Option configures a Limiter or a Registry.
type Option func(*options)

type options struct {
	clock clock.Clock
}

// WithClock sets the clock used for max_wait timers (default: the real clock).
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

func buildOptions(opts []Option) options {
	o := options{clock: clock.Real{}}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// New returns a limiter named name with settings s, or s's validation error.
func New(name string, s Settings, opts ...Option) (*Limiter, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	o := buildOptions(opts)
	l := &Limiter{name: name, clock: o.clock}
	l.setLocked(s)
	return l, nil
}

// Name returns the bulkhead's key.
func (l *Limiter) Name() string { return l.name }

// Settings returns the current settings.
func (l *Limiter) Settings() Settings {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.settings
}

// Acquire takes a permit for a request of class p. It returns at once when
// the class ceiling allows and no waiter of equal or higher class is queued;
// otherwise it waits in the queue until granted, until max_wait passes
// (ErrTimeout), or until ctx ends (ctx.Err()), whichever comes first. A full
// queue sheds the youngest waiter of a strictly lower class or, with none,
// returns ErrQueueFull. A closed limiter returns ErrClosed.
//
// An invalid p is treated as BestEffort. When ctx ends at the same moment
// as a grant, the permit is given back before Acquire returns: a caller that
// gets an error never holds a permit.
func (l *Limiter) Acquire(ctx context.Context, p Priority) (Permit, error) {
	return l.acquire(ctx, p, 0, false)
}

// AcquireBefore is Acquire whose wait also ends at deadline, with
// ErrTimeout: callers pass their RPC deadline less a margin so that they
// always answer in time. The wait is min(max_wait, deadline - now). If the
// deadline has already passed, only an arrival that needs no wait is
// granted; one that would queue gets ErrTimeout at once and sheds nobody.
// A zero deadline means no deadline.
func (l *Limiter) AcquireBefore(ctx context.Context, p Priority, deadline time.Time) (Permit, error) {
	if deadline.IsZero() {
		return l.acquire(ctx, p, 0, false)
	}
	return l.acquire(ctx, p, deadline.Sub(l.clock.Now()), true)
}

// acquire implements Acquire; when capped, the wait is at most budget.
func (l *Limiter) acquire(ctx context.Context, p Priority, budget time.Duration, capped bool) (Permit, error) {
	done := ctx.Done()
	l.mu.Lock()
	select {
	case <-done:
		// ctx ending happened before the acquire: do not take a permit.
		l.stats.cancelled++
		l.mu.Unlock()
		return Permit{}, ctx.Err()
	default:
	}
	wait := l.settings.MaxWait
	if capped && (wait == 0 || budget < wait) {
		wait = budget
	}
	if l.twin != nil && !l.closed {
		noWait := ReasonNone
		if capped && wait <= 0 {
			noWait = ReasonTimeout
		}
		permit := l.admitDryLocked(p, wait, noWait)
		l.mu.Unlock()
		return permit, nil
	}
	w, permit, err := l.enqueueLocked(p, capped && wait <= 0)
	l.mu.Unlock()
	if w == nil {
		return permit, err
	}
	if w.bound > 0 && (wait == 0 || w.bound < wait) {
		wait = w.bound // an overloaded CoDel queue
	}
	var expired <-chan time.Time
	if wait > 0 {
		t := l.clock.NewTimer(wait)
		defer t.Stop()
		expired = t.C()
	}
	select {
	case <-w.ready:
		return w.permit, w.err
	case <-done:
		return l.abandon(w, ctx.Err())
	case <-expired:
		return l.abandon(w, ErrTimeout)
	}
}

// TryAcquire takes a permit only if it can be granted at once, never
// waiting; otherwise it returns the reason it would have waited or been
// rejected (ErrQueueFull stands for "would wait").
func (l *Limiter) TryAcquire(p Priority) (Permit, error) {
	if !p.Valid() {
		p = BestEffort
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.stats.rejected[ReasonUnknownBulkhead]++
		return Permit{}, ErrClosed
	}
	if l.twin != nil {
		return l.admitDryLocked(p, 0, ReasonQueueFull), nil
	}
	if l.admissibleLocked(p) {
		if l.settings.Queue == CoDel {
			l.codelAdmittedLocked()
		}
		return l.grantLocked(p), nil
	}
	l.stats.rejected[ReasonQueueFull]++
	return Permit{}, ErrQueueFull
}

// enqueueLocked decides an arrival of class p: granted at once (permit),
// rejected at once (err), or queued (w != nil). With noWait an arrival that
// would queue gets ErrTimeout instead. l.mu must be held.
func (l *Limiter) enqueueLocked(p Priority, noWait bool) (w *waiter, permit Permit, err error) {
	if !p.Valid() {
		p = BestEffort
	}
	if l.closed {
		l.stats.rejected[ReasonUnknownBulkhead]++
		return nil, Permit{}, ErrClosed
	}
	if l.admissibleLocked(p) {
		if l.settings.Queue == CoDel {
			l.codelAdmittedLocked()
		}
		return nil, l.grantLocked(p), nil
	}
	// Every waiter notes when it queued, FIFO too: after a resize to CoDel
	// its wait is read from enq (codelPickLocked).
	enq := l.clock.Now()
	var bound time.Duration
	if l.settings.Queue == CoDel {
		bound = l.codelBusyLocked(enq)
	}
	if noWait {
		l.stats.rejected[ReasonTimeout]++
		return nil, Permit{}, ErrTimeout
	}
	if l.queued >= l.settings.MaxQueue {
		victim := l.youngestFromLocked(p + 1)
		if victim == nil {
			l.stats.rejected[ReasonQueueFull]++
			return nil, Permit{}, ErrQueueFull
		}
		l.rejectLocked(victim, ErrShed)
	}
	w = &waiter{prio: p, ready: make(chan struct{}), enq: enq, bound: bound}
	l.queues[p].pushBack(w)
	l.queued++
	return w, Permit{}, nil
}

// admissibleLocked reports whether an arrival of class p may be granted now:
// its ceiling allows one more permit and no waiter of equal or higher class
// is queued.
func (l *Limiter) admissibleLocked(p Priority) bool {
	if l.inUse >= l.ceil[p] {
		return false
	}
	if l.queued == 0 {
		return true
	}
	for c := Critical; c <= p; c++ {
		if l.queues[c].n > 0 {
			return false
		}
	}
	return true
}

// abandon ends a wait that ran out (ctx ended, or max_wait passed: cause is
// ctx.Err() or ErrTimeout). If the waiter was decided at the same moment the
// decision is honoured, except that a permit granted to a cancelled caller
// is given back: a waiter whose context ended never holds a permit.
func (l *Limiter) abandon(w *waiter, cause error) (Permit, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-w.ready:
		if w.err != nil {
			return Permit{}, w.err
		}
		if errors.Is(cause, ErrTimeout) {
			// Granted as max_wait passed: the grant came in time.
			return w.permit, nil
		}
		l.stats.cancelled++
		l.releaseLocked(w.permit)
		return Permit{}, cause
	default:
	}
	l.queues[w.prio].remove(w)
	l.queued--
	if errors.Is(cause, ErrTimeout) {
		l.stats.rejected[ReasonTimeout]++
	} else {
		l.stats.cancelled++
	}
	// Leaving cannot make another waiter grantable (ceilings fall with the
	// class), but keep the "no grantable waiter is queued" invariant obvious.
	l.notifyLocked()
	return Permit{}, cause
}

func (l *Limiter) grantLocked(p Priority) Permit {
	l.stats.admitted[p]++
	return l.takeSlotLocked()
}

// takeSlotLocked counts one more permit in use and returns it.
func (l *Limiter) takeSlotLocked() Permit {
	var i uint32
	if n := len(l.free); n > 0 {
		i = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		i = uint32(len(l.slots))
		l.slots = append(l.slots, slot{})
	}
	l.slots[i].busy = true
	l.inUse++
	l.peak = max(l.peak, l.inUse)
	return Permit{l: l, slot: i, gen: l.slots[i].gen}
}

func (l *Limiter) release(p Permit) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.releaseLocked(p)
}

func (l *Limiter) releaseLocked(p Permit) bool {
	if int(p.slot) >= len(l.slots) || !l.slots[p.slot].busy || l.slots[p.slot].gen != p.gen {
		l.stats.duplicates++
		return false
	}
	s := &l.slots[p.slot]
	s.busy = false
	s.gen++
	if g := s.ghost; g != nil {
		s.ghost = nil
		l.twin.end(l.clock.Now(), g, &l.ceil, &l.stats.wouldReject)
	}
	l.free = append(l.free, p.slot)
	l.inUse--
	l.stats.released++
	l.notifyLocked()
	return true
}

// notifyLocked grants permits to waiters, highest class first and FIFO
// within a class (or as CoDel picks, codel.go), while the head waiter's
// class ceiling allows. Ceilings
// never rise as the class falls, so once the highest waiting class cannot be
// served no lower class can: afterwards no queued waiter is grantable.
func (l *Limiter) notifyLocked() {
	if l.twin != nil {
		l.notifyDryLocked()
		return
	}
	for l.queued > 0 {
		var head *waiter
		for c := range l.queues {
			if h := l.queues[c].head; h != nil {
				head = h
				break
			}
		}
		if head == nil || l.inUse >= l.ceil[head.prio] {
			return
		}
		if l.settings.Queue == CoDel {
			if head = l.codelPickLocked(head.prio); head == nil {
				continue // dropped the whole class
			}
		}
		l.queues[head.prio].remove(head)
		l.queued--
		head.permit = l.grantLocked(head.prio)
		close(head.ready)
	}
}

// rejectLocked removes a queued waiter and decides it with err.
func (l *Limiter) rejectLocked(w *waiter, err *Rejection) {
	l.queues[w.prio].remove(w)
	l.queued--
	l.stats.rejected[err.reason]++
	w.err = err
	close(w.ready)
}

// youngestFromLocked returns the youngest waiter of the lowest queued class
// in [lowest, BestEffort] (so lowest-1 for "strictly below"), or nil.
func (l *Limiter) youngestFromLocked(lowest Priority) *waiter {
	for c := int(numPriorities) - 1; c >= int(lowest); c-- {
		if t := l.queues[c].tail; t != nil {
			return t
		}
	}
	return nil
}
