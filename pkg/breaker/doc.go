// Package breaker is the mesh-wide circuit breaker of a bulkhead: one
// Breaker per bulkhead, fed with the outcome of every request that Envoy's
// access log reports, whichever Envoy sent it. It imports neither gRPC nor
// Prometheus.
//
// # Model
//
// A Breaker is Closed, Open or HalfOpen.
//
//   - Closed: every request is allowed. Outcomes fall into a rolling window
//     of Settings.Window, kept as numBuckets time buckets (bounded memory).
//     A request fails when its outcome is a failure (5xx, reset, no answer)
//     or, with SlowCallDuration set, when it ran at least that long. Once the
//     window holds at least MinRequests outcomes and the failed fraction is
//     at least FailureRatio, the breaker opens.
//   - Open: every request is refused, with the time left until OpenFor has
//     passed since it opened; then the breaker is half-open.
//   - HalfOpen: at most HalfOpenProbes requests are allowed (probes). A
//     failed probe opens the breaker again; HalfOpenProbes successful ones
//     close it with an empty window. Probes that report no outcome (refused
//     further on, or lost) are given up after OpenFor: new probes may go.
//
// Outcomes that arrive while the breaker is Open (of requests allowed
// before it opened) are ignored. An operator Mode overrides the state:
// ForceOpen refuses everything, ForceClosed allows everything and records
// nothing; Auto (the default) returns to the model above, from Closed.
//
// # Invariants
//
//   - Open refuses every request; HalfOpen allows at most HalfOpenProbes
//     requests per probe round.
//   - Memory per Breaker is constant: numBuckets counters.
//   - Every state change is counted once in Snapshot.Transitions.
//
// # Concurrency
//
// Breaker and Set are safe for concurrent use. Each Breaker has its own
// mutex; Set.Get is lock-free, so one bulkhead's breaker never blocks
// another's Checks.
package breaker
