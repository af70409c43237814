package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// UnknownDependency is the dependency label of checks that named no
// configured bulkhead; the key they did name is never a label value.
const UnknownDependency = "_unknown"

// SnapshotSource lists the bulkheads to report. *bulkhead.Registry is one.
type SnapshotSource interface {
	Snapshots() []bulkhead.Snapshot
}

// Metrics records Bulkhead's metrics.
type Metrics struct {
	success, failure *prometheus.CounterVec
	aborted          *prometheus.CounterVec
	wait, hold       *prometheus.HistogramVec
	releaseLag       *prometheus.HistogramVec
	expired          *prometheus.CounterVec
	releases         *prometheus.CounterVec
	invalidPriority  *prometheus.CounterVec
	invalidLeaseTTL  *prometheus.CounterVec
	unmatched        *prometheus.CounterVec
	logEntries       *prometheus.CounterVec
	streams          prometheus.Gauge
	nodes            prometheus.Gauge
	nodesLost        prometheus.Counter
	reloads          *prometheus.CounterVec
	leases           leaseMetrics

	unknownRejected atomic.Uint64 // rejected with reason unknown_bulkhead, no bulkhead
	seen            sync.Map      // dependency -> struct{}: its per-request series exist
	outcomes        sync.Map      // dependency -> *outcomeCounts
}

var (
	_ permit.Observer = (*Metrics)(nil)

	// Buckets from 1 ms to ~33 s: waits are short, holds span request times.
	timeBuckets = prometheus.ExponentialBuckets(0.001, 2, 16)
	// Release lags are small when the access log streams unbuffered; the
	// buckets resolve the 5 ms the design allows, and show a buffered log
	// (up to its 1 s flush interval) plainly.
	lagBuckets = []float64{.00025, .0005, .001, .002, .003, .004, .005, .0075, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
)

// New creates the metrics and registers them, with a collector over src,
// on reg.
func New(reg prometheus.Registerer, src SnapshotSource) (*Metrics, error) {
	m := &Metrics{
		success: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_success_total", Help: "Admitted requests that ended without a 5xx or a reset (from the access log).",
		}, []string{"dependency"}),
		failure: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_failure_total", Help: "Admitted requests that ended with a 5xx, or with no response because of an upstream or local reset or timeout.",
		}, []string{"dependency"}),
		aborted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_aborted_total", Help: "Admitted requests whose client went away before a response (neither success nor failure).",
		}, []string{"dependency"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "bulkhead_wait_seconds", Help: "Time from Check arrival to permit grant, for admitted requests.", Buckets: timeBuckets,
		}, []string{"dependency"}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "bulkhead_permit_hold_seconds", Help: "Time a permit was held, from grant to release by any source.", Buckets: timeBuckets,
		}, []string{"dependency"}),
		releaseLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bulkhead_permit_release_lag_seconds",
			Help:    "Time a permit released by the access log was held beyond its upstream's own work: hold time less the upstream's first-byte-sent to last-byte-received time in the entry.",
			Buckets: lagBuckets,
		}, []string{"dependency"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_permits_expired_total", Help: "Permits reclaimed by lease expiry: their access-log entry never arrived.",
		}, []string{"dependency"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_releases_total", Help: "Permit releases by source; duplicate and unknown are no-ops.",
		}, []string{"source"}),
		invalidPriority: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_invalid_priority_total", Help: "Checks whose priority value was not a known class (the default class was used).",
		}, []string{"dependency"}),
		invalidLeaseTTL: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_invalid_lease_ttl_total", Help: "Route lease_ttl values (context_extensions) that were not a positive duration (ignored) or above leases.max_route_ttl (cut to it).",
		}, []string{"dependency"}),
		unmatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_unmatched_checks_total", Help: "Checks with no or an unknown bulkhead key, by the policy's outcome.",
		}, []string{"outcome"}),
		logEntries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_access_log_entries_total", Help: "Access-log entries received, by what was done with them.",
		}, []string{"result"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulkhead_access_log_streams", Help: "Open access-log streams (one per Envoy worker).",
		}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulkhead_access_log_nodes", Help: "Envoy nodes tracked for node-lost reclamation (with an open access-log stream, or within their grace period).",
		}),
		nodesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulkhead_nodes_lost_total", Help: "Envoy nodes declared lost (no access-log stream and no Check for leases.node_grace); their permits were released.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_config_reloads_total", Help: "Configuration loads by result.",
		}, []string{"result"}),
	}
	cs := []prometheus.Collector{m.success, m.failure, m.aborted, m.wait, m.hold, m.releaseLag, m.expired, m.releases,
		m.invalidPriority, m.invalidLeaseTTL, m.unmatched, m.logEntries, m.streams, m.nodes, m.nodesLost, m.reloads, &snapshotCollector{src: src, m: m}}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	var err error
	if m.leases, err = newLeaseMetrics(reg); err != nil {
		return nil, err
	}
	for _, s := range []string{"access_log", "ttl", "cancel", "node_lost", "shutdown", "duplicate", "unknown"} {
		m.releases.WithLabelValues(s)
	}
	for _, r := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(r)
	}
	return m, nil
}

// Waited records the wait of an admitted request.
func (m *Metrics) Waited(dependency string, d time.Duration) {
	if _, ok := m.seen.Load(dependency); !ok {
		m.initDependency(dependency)
	}
	m.wait.WithLabelValues(dependency).Observe(d.Seconds())
}

// initDependency creates a dependency's per-request series at zero when it
// admits its first request, so that ratios such as failure / (success +
// failure) read 0 rather than "no data" before the first failure. Every
// outcome, hold and expiry follows an admission (an adoption creates its
// own series, and reads 0 until the first).
func (m *Metrics) initDependency(dependency string) {
	for _, v := range []*prometheus.CounterVec{m.success, m.failure, m.aborted, m.expired, m.leases.adopted} {
		v.WithLabelValues(dependency)
	}
	m.hold.WithLabelValues(dependency)
	m.releaseLag.WithLabelValues(dependency)
	m.seen.Store(dependency, struct{}{})
}

type outcomeCounts struct{ success, failure, aborted atomic.Uint64 }

// Outcomes returns how many of a dependency's admitted requests ended in
// success, failure and client abort (the admin API shows them).
func (m *Metrics) Outcomes(dependency string) (success, failure, aborted uint64) {
	v, ok := m.outcomes.Load(dependency)
	if !ok {
		return 0, 0, 0
	}
	c := v.(*outcomeCounts)
	return c.success.Load(), c.failure.Load(), c.aborted.Load()
}

// Outcome records how an admitted request ended.
func (m *Metrics) Outcome(dependency string, o bulkhead.Outcome) {
	v, ok := m.outcomes.Load(dependency)
	if !ok {
		v, _ = m.outcomes.LoadOrStore(dependency, &outcomeCounts{})
	}
	c := v.(*outcomeCounts)
	switch o {
	case bulkhead.Success:
		c.success.Add(1)
		m.success.WithLabelValues(dependency).Inc()
	case bulkhead.Failure:
		c.failure.Add(1)
		m.failure.WithLabelValues(dependency).Inc()
	default:
		c.aborted.Add(1)
		m.aborted.WithLabelValues(dependency).Inc()
	}
}

// ReleaseLag records a permit's hold time beyond its upstream's work.
func (m *Metrics) ReleaseLag(dependency string, d time.Duration) {
	m.releaseLag.WithLabelValues(dependency).Observe(d.Seconds())
}

// InvalidPriority counts a check whose priority value was not a class.
func (m *Metrics) InvalidPriority(dependency string) {
	m.invalidPriority.WithLabelValues(dependency).Inc()
}

// InvalidLeaseTTL counts a route lease_ttl that was ignored or cut.
func (m *Metrics) InvalidLeaseTTL(dependency string) {
	m.invalidLeaseTTL.WithLabelValues(dependency).Inc()
}

// NodeLost counts an Envoy node declared lost; its released permits are
// counted by source node_lost in bulkhead_releases_total.
func (m *Metrics) NodeLost(int) { m.nodesLost.Inc() }

// NodesTracked sets the number of Envoy nodes tracked.
func (m *Metrics) NodesTracked(n int) { m.nodes.Set(float64(n)) }

// Unmatched counts a check with no or an unknown bulkhead key, by outcome:
// "allowed", "denied" or "defaulted". Denied ones also count as rejected
// with reason unknown_bulkhead under dependency "_unknown".
func (m *Metrics) Unmatched(outcome string) {
	m.unmatched.WithLabelValues(outcome).Inc()
	if outcome == "denied" {
		m.unknownRejected.Add(1)
	}
}

// LogEntry counts an access-log entry by result (released, duplicate,
// unknown, no_token, not_end).
func (m *Metrics) LogEntry(result string) { m.logEntries.WithLabelValues(result).Inc() }

// StreamOpened and StreamClosed track open access-log streams.
func (m *Metrics) StreamOpened() { m.streams.Inc() }

// StreamClosed: see StreamOpened.
func (m *Metrics) StreamClosed() { m.streams.Dec() }

// Reload counts a configuration load by result.
func (m *Metrics) Reload(ok bool) {
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
}

// Held records how long an in-process call held its permit (the sidecar's
// holds are recorded by Ended).
func (m *Metrics) Held(dependency string, d time.Duration) {
	m.hold.WithLabelValues(dependency).Observe(d.Seconds())
}

// Ended implements permit.Observer: a lease ended by a real release.
func (m *Metrics) Ended(l permit.Lease, src permit.Source, at time.Time) {
	m.releases.WithLabelValues(src.String()).Inc()
	m.hold.WithLabelValues(l.Bulkhead).Observe(at.Sub(l.Acquired).Seconds())
	if src == permit.TTL {
		m.expired.WithLabelValues(l.Bulkhead).Inc()
	}
}

// Ignored implements permit.Observer: a release that found nothing to do.
func (m *Metrics) Ignored(_ permit.Source, r permit.Result) {
	switch r {
	case permit.Duplicate, permit.Expired:
		m.releases.WithLabelValues("duplicate").Inc()
	case permit.Unknown:
		m.releases.WithLabelValues("unknown").Inc()
	}
}
