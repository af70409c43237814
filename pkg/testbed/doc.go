// Package testbed is test and demo infrastructure, not a stable API: it is
// shared by the e2e tests and cmd/bulkhead-demo and may change with them.
//
// It owns these tools:
//
//   - Upstream, an HTTP server on 127.0.0.1 that counts its own concurrent
//     requests exactly (current and maximum in flight), so tests can check the
//     bulkhead invariant where it matters: at the dependency. Its delay, status
//     and a Hold/ReleaseHeld gate are controlled at run time.
//   - TCPEcho, a TCP echo server on 127.0.0.1 that counts its own open
//     connections (current and maximum), for connection bulkheads.
//   - Load, a bounded open-loop load driver: a fixed request rate, a duration,
//     a maximum count and a cap on outstanding requests, and Stop, which
//     ends the schedule and lets the requests out finish; it records statuses,
//     x-bulkhead-reason values, transport errors and latencies.
//   - Scrape/ParseMetrics, a small reader of the Prometheus text exposition
//     format with label-based lookups.
//
// Upstream, TCPEcho and Load are safe for concurrent use; a Metrics value is immutable
// once parsed. Every goroutine these types start is stopped by Upstream.Close,
// TCPEcho.Close or by the end of Load.Run.
package testbed
