// Package metrics owns Bulkhead's Prometheus metrics, registered on an
// injected registry (never the global one).
//
// Limiter state (limit, active, queued, admitted, rejected, cancelled) is not
// counted twice: a collector reads every bulkhead's Snapshot at scrape time,
// so the acquire/release path touches no Prometheus object. Outcomes, wait
// and hold times, releases and expiries are recorded as they happen.
//
// Label values are bounded: dependency is a configured bulkhead name (or
// "_unknown" for checks that named none), priority, reason and source are
// closed sets. A Metrics value is safe for concurrent use.
package metrics
