// Package grpcbulkhead puts Bulkhead's limiter (pkg/bulkhead) on gRPC, with
// semaphore isolation:
//
//   - Server interceptors (unary and stream) pick a bulkhead per method from
//     a key function, take a permit for the call's class (from the
//     x-bulkhead-priority metadata) and hold it while the handler runs, for
//     a stream until the handler returns.
//   - Client interceptors (unary and stream) guard one dependency (one
//     ClientConn) with its limiter: a unary call holds a permit for the
//     call; a stream from its creation until RecvMsg reports the end (an
//     error, io.EOF, or the single response of a stream the server does
//     not stream) or its context ends. As with any gRPC stream, a caller
//     that neither reads to the end nor cancels keeps its permit.
//
// A rejection is a *RejectedError: status RESOURCE_EXHAUSTED carrying an
// errdetails.ErrorInfo (domain "bulkhead", reason QUEUE_FULL, SHED,
// TIMEOUT, UNKNOWN_BULKHEAD; metadata bulkhead and reason) and an
// errdetails.RetryInfo; servers also set the trailer x-bulkhead-reason.
// errors.Is(err, bulkhead.ErrQueueFull) holds on the client side for a local
// rejection, and ReasonOf reads the reason of a local or remote one. A
// caller whose context ends while waiting gets the context's status
// (CANCELED or DEADLINE_EXCEEDED). WithDeadlineMargin makes a waiter give
// up that long before the call's deadline, so the caller gets a clean
// RESOURCE_EXHAUSTED (reason timeout) instead of a deadline error; it
// compares the deadline with the limiter's clock, which must be the real
// one.
//
// # Invariants
//
//   - A call or stream holds at most one permit and releases it exactly
//     once, also when the handler panics (the panic goes on: recovering is
//     the job of a recovery interceptor placed outside this one).
//   - A call whose context ended while it waited holds no permit.
//   - A rejected call never reaches the handler, or the network.
//
// Interceptors are safe for concurrent use. Priority metadata is trusted:
// strip or overwrite it where calls enter your network.
package grpcbulkhead
