// Package isolation puts Bulkhead's limiter (pkg/bulkhead) around calls made
// inside a Go service, with the two isolation strategies of the design:
//
//   - Semaphore isolation (*Semaphore): the caller's goroutine runs the call
//     while it holds a permit of a bulkhead.Limiter. Cheap (no allocation on
//     the path that does not wait), but a call that ignores its context keeps
//     the caller's goroutine for as long as it runs.
//   - Pool isolation (*Pool): a dedicated, bounded set of worker goroutines
//     per dependency runs the calls; the caller submits and waits, and stops
//     waiting when its context ends or the pool's call timeout passes, even
//     if the call itself never looks at its context. A slow dependency can
//     then tie up only its own workers, never the callers' goroutines.
//
// Do is the generic entry point for both (the design's execute(call,
// fallback, priority)); Execute is the non-generic one. Middleware for
// net/http and gRPC lives in the subpackages httpbulkhead and grpcbulkhead;
// callmetrics records calls in pkg/metrics, the sidecar's collectors.
//
// # Model of a Pool
//
// A Pool owns a bulkhead.Limiter whose permits are worker slots: the
// limiter's max_concurrent is the number of workers, its max_queue the
// queue bound, and its priority classes, reserves, max_wait and shedding
// apply unchanged. Submitting a call means: take a permit (waiting in the
// limiter's queue, which is the pool's queue), hand the call to an idle
// worker, and wait for it. The worker runs the call and, before it gives
// the permit back, parks itself as idle (or exits when the pool has shrunk
// or closed), so a permit granted next finds an idle worker.
//
// Rejections (queue_full, shed, timeout, closed) follow the pool's
// RejectionPolicy: Abort returns the rejection (Do then calls the
// fallback, if one was given: that is the "fallback" policy, per call
// because the fallback returns the caller's own type); CallerRuns runs the
// call on the caller's goroutine, outside the bulkhead (back-pressure on the
// submitter; it protects nothing downstream). A closed pool never runs
// calls, whatever the policy.
//
// # Invariants
//
//   - Calls running on workers never exceed the limit, except calls admitted
//     before a shrink (the limiter never revokes a permit): every running
//     call holds a permit, and the limiter's invariant bounds permits.
//   - Live workers never exceed max(limit, permits in use): a worker parks
//     only while live <= limit, and is started only for a permit holder that
//     found no idle worker (or by NewPool and Resize, up to the limit).
//   - Each permit is released exactly once, by the worker that ran its call
//     (or by the caller, when the pool closed between grant and hand-off),
//     including when the call panics or calls runtime.Goexit.
//   - A call runs at most once. A call whose context ended before a worker
//     picked it up does not run.
//   - Execute reports a call as run (Do returns its result) only when the
//     call returned before Execute did: the worker's writes happen before
//     its send on the job's done channel, its last touch of the job, which
//     happens before the caller's receive and reads. A caller that stopped
//     waiting never touches the job again, and such a job is never reused.
//   - When Execute returns a call's result, its permit is already back.
//   - After Close returns nil no worker goroutine is left and no call runs.
//
// # Panics
//
// A call that panics does not kill a worker or leak a permit: the panic is
// recovered, the permit released, and the caller gets a *PanicError
// (errors.Is(err, ErrPanic)) carrying the value and the stack. The same
// holds for Semaphore (the panic is recovered on the caller's goroutine).
//
// # Concurrency
//
// Semaphore, Pool and Group are safe for concurrent use. Work on one
// bulkhead never blocks another: each Pool has its own mutex, and the
// shared state on a semaphore's path is only its Limiter's mutex.
package isolation
