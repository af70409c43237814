// Package callmetrics records the calls of in-process bulkheads (package
// isolation and its middleware) in the sidecar's collectors (pkg/metrics),
// so that a Go service and the sidecar export the same series:
// bulkhead_wait_seconds{dependency} for admitted calls,
// bulkhead_success_total / bulkhead_failure_total{dependency} for their
// outcomes, and bulkhead_permit_hold_seconds{dependency} when the recorder
// can record hold times (see Observer). The limiter series
// (bulkhead_active_calls, _queued_calls, _limit, _admitted_total,
// _rejected_total, ...) come from metrics.New's snapshot source: pass it a
// *bulkhead.Registry, an isolation.Group of pools, or isolation.Sources
// joining both.
//
// An Observer holds no state of its own and is safe for concurrent use if
// its Recorder is (*metrics.Metrics is).
package callmetrics
