// Package bulkhead is the limiter at the core of Bulkhead: one counting
// semaphore per bulkhead, with priority classes, reserved headroom, a
// bounded priority wait queue with load shedding, and resize at run time.
// It imports neither gRPC nor Prometheus.
//
// # Model
//
// A Limiter has a limit (max_concurrent), a queue bound (max_queue, 0 =
// fail fast), a wait bound (max_wait) and two reserves. Classes, highest
// first: Critical, Normal, BestEffort. Critical may fill the whole limit,
// Normal the limit less ceil(reserve.critical*limit), BestEffort the limit
// less ceil((reserve.critical+reserve.normal)*limit) (Settings.Ceiling).
//
// An arrival of class p is granted at once when in-use is below p's ceiling
// and no waiter of class p or higher is queued. Otherwise it joins the one
// bounded queue, served highest class first and FIFO within a class. If the
// queue is full, the arrival evicts the youngest waiter of the lowest class
// strictly below p (that waiter gets ErrShed); with none, the arrival gets
// ErrQueueFull. A waiter leaves the queue when granted, when max_wait passes
// (ErrTimeout), when its context ends (the context's error), when shed, or
// when the limiter closes (ErrClosed).
//
// # CoDel
//
// With Settings.Queue CoDel (codel.go) the order within a class adapts to
// overload. The limiter turns overloaded once, for CoDelInterval, no arrival
// was admitted at once and no waiter was served within CoDelTarget in FIFO
// order; it stays overloaded until, for the interval, no arrival had to
// queue. Overloaded, a new waiter waits at most the target (ErrTimeout), and
// a freed permit first drops the oldest waiters of the class it serves that
// waited past the target (ErrTimeout), then goes to the newest (adaptive
// LIFO). Classes still come first, and every invariant below holds. The
// dry-run twin simulates FIFO only.
//
// # Dry run
//
// A limiter whose Settings.DryRun is set (the configuration's enforce:
// false) admits every arrival at once, past the limit and the reserves, and
// runs an enforcing twin beside it (dryrun.go): a simulation of the same
// limiter driven by the real arrivals and ends, which counts by reason what
// it would have rejected (Snapshot.WouldReject). A request the twin admits
// late holds its virtual permit as long as the real request ran, from its
// virtual grant. On a trace of arrivals and hold times the twin's counts
// equal the rejections of an enforcing limiter (dryrun_test.go). Turning
// dry run on admits the waiters at once; turning it off keeps the permits
// in use, like a shrink.
//
// # Invariants
//
//   - A permit is granted only while in-use is below the grantee's class
//     ceiling, so in-use never exceeds the limit, except for permits granted
//     before a shrink (Resize never revokes permits) and in a dry run.
//   - After every operation no queued waiter is grantable: whenever in-use
//     falls or a ceiling rises, waiters are granted in queue order before the
//     lock is released.
//   - A waiter is decided exactly once, under the limiter's lock, by closing
//     its ready channel; the decision (permit or error) is written before the
//     close, so it happens before the waiter observes it.
//   - A caller whose Acquire returns an error holds no permit: if its context
//     ended at the same moment it was granted, Acquire releases that permit
//     under the lock before returning.
//   - Each Permit is released at most once: a slot generation makes a second
//     Release a counted no-op that returns false.
//   - Snapshot counters only grow, and Admitted minus Released equals InUse.
//
// # Concurrency
//
// Limiter, Permit and Registry are safe for concurrent use. Each Limiter
// has its own mutex; Registry.Get is lock-free, so work on one bulkhead
// never blocks another. The path that does not wait allocates nothing
// (except in a dry run: one ghost per arrival).
package bulkhead
