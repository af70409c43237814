// Package metrics owns Bulkhead's Prometheus metrics, registered on an
// injected registry (never the global one).
//
// The package observes; it keeps no state that others read. Limiter state
// (limit, active, queued, admitted, rejected, cancelled) is not counted
// twice: a collector reads every bulkhead's Snapshot at scrape time (and,
// with the Redis ledger, every replica's counts from the ledger: UseGlobal),
// so the acquire/release path touches no Prometheus object. Outcomes, wait
// and hold times, releases and expiries are recorded as they happen, as are
// the Check inputs that were invalid, distrusted or ignored (inputs.go) and,
// when the gRPC listener serves TLS, the loads of its files (tls.go).
//
// Each series the Check and access-log paths record is resolved once, on
// first use, and kept (handles.go, dependency.go): recording is a lock-free
// map load and the series' own update, not WithLabelValues (label checks,
// hashing, the vector's lock) on every request.
//
// Label values are bounded: dependency is a configured bulkhead name (or
// "_unknown" for checks that named none), priority, reason, source, result,
// outcome and input are closed sets (typed constants of bulkhead, permit
// and admission, below both this package and the servers that record
// them: it imports no server); the resolved series are bounded as the
// labels are. Metrics and LedgerMetrics values are safe for concurrent use.
package metrics
