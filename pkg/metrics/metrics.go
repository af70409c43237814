package metrics

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
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
	logEntries       *counters // by permit.EntryResult
	streams          prometheus.Gauge
	reloads          *prometheus.CounterVec
	inputs           inputs
	tls              tlsMetrics
	leases           leaseMetrics

	// Series resolved once.
	releasedBy         []prometheus.Counter // by permit.Source
	duplicate, unknown prometheus.Counter   // releases that did nothing
	reloaded, refused  prometheus.Counter   // configuration loads by result

	global          GlobalSource  // nil: this process's counts (UseGlobal)
	unknownRejected atomic.Uint64 // rejected with reason unknown_bulkhead, no bulkhead
	deps            sync.Map      // dependency name -> *depSeries
	kinds           atomic.Pointer[map[string]string]
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

// The result label of configuration and TLS loads.
const (
	resultSuccess = "success"
	resultFailure = "failure"
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
		logEntries: newCounters(prometheus.CounterOpts{
			Name: "bulkhead_access_log_entries_total", Help: "Access-log entries received, by what was done with them.",
		}, "result"),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulkhead_access_log_streams", Help: "Open access-log streams (one per Envoy worker).",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_config_reloads_total", Help: "Configuration loads by result.",
		}, []string{"result"}),
		inputs: newInputs(),
	}
	cs := []prometheus.Collector{m.success, m.failure, m.aborted, m.wait, m.hold, m.releaseLag, m.expired, m.releases,
		m.logEntries.vec, m.streams, m.reloads, &snapshotCollector{src: src, m: m}}
	for _, c := range append(cs, m.inputs.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	var err error
	if m.leases, err = newLeaseMetrics(reg); err != nil {
		return nil, err
	}
	for _, r := range permit.EntryResults() {
		m.logEntries.with(string(r))
	}
	for _, s := range permit.Sources() {
		for len(m.releasedBy) <= int(s) {
			m.releasedBy = append(m.releasedBy, nil)
		}
		m.releasedBy[s] = m.releases.WithLabelValues(s.String())
	}
	m.duplicate = m.releases.WithLabelValues(permit.Duplicate.String())
	m.unknown = m.releases.WithLabelValues(permit.Unknown.String())
	m.reloaded = m.reloads.WithLabelValues(resultSuccess)
	m.refused = m.reloads.WithLabelValues(resultFailure)
	return m, nil
}

// GlobalSource gives a bulkhead's counts summed over every replica, when
// a ledger that several replicas share keeps them; *redisledger.Ledger is
// one.
type GlobalSource interface {
	Global(bulkhead string) (admission.Global, bool)
}

// UseGlobal makes the bulkhead gauges (active and queued calls, recovering)
// report the counts src has of every replica, when it has them, instead of
// this process's limiters'. Call it before serving.
func (m *Metrics) UseGlobal(src GlobalSource) { m.global = src }

// released returns the releases series of src.
func (m *Metrics) released(src permit.Source) prometheus.Counter {
	if int(src) < len(m.releasedBy) && m.releasedBy[src] != nil {
		return m.releasedBy[src]
	}
	return m.releases.WithLabelValues(src.String())
}

// Ignored implements permit.Observer: a release that found nothing to do.
func (m *Metrics) Ignored(_ permit.Source, r permit.Result) {
	switch r {
	case permit.Duplicate, permit.Expired:
		m.duplicate.Inc()
	case permit.Unknown:
		m.unknown.Inc()
	}
}

// LogEntry counts an access-log entry by what was done with it.
func (m *Metrics) LogEntry(result permit.EntryResult) { m.logEntries.with(string(result)).Inc() }

// StreamOpened and StreamClosed track open access-log streams.
func (m *Metrics) StreamOpened() { m.streams.Inc() }

// StreamClosed is StreamOpened's counterpart.
func (m *Metrics) StreamClosed() { m.streams.Dec() }

// Reload counts a configuration load by result.
func (m *Metrics) Reload(ok bool) {
	if ok {
		m.reloaded.Inc()
		return
	}
	m.refused.Inc()
}
