package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// depSeries holds one dependency's per-request series, resolved once.
type depSeries struct {
	wait, hold, releaseLag             prometheus.Observer
	success, failure, aborted, expired prometheus.Counter
	adopted                            prometheus.Counter
}

// series returns the series of a dependency. The first call for a name
// creates all of them at zero, so that ratios such as failure / (success +
// failure) read 0 rather than "no data" before the first failure; it comes
// with the dependency's first admission (every outcome, hold and expiry
// follows one). Names are configured bulkheads, so the map is bounded.
func (m *Metrics) series(name string) *depSeries {
	if d, ok := m.deps.Load(name); ok {
		return d.(*depSeries)
	}
	d, _ := m.deps.LoadOrStore(name, &depSeries{
		wait:       m.wait.WithLabelValues(name),
		hold:       m.hold.WithLabelValues(name),
		releaseLag: m.releaseLag.WithLabelValues(name),
		success:    m.success.WithLabelValues(name),
		failure:    m.failure.WithLabelValues(name),
		aborted:    m.aborted.WithLabelValues(name),
		expired:    m.expired.WithLabelValues(name),
		adopted:    m.leases.adopted.WithLabelValues(name),
	})
	return d.(*depSeries)
}

// Waited records the wait of an admitted request.
func (m *Metrics) Waited(dependency string, d time.Duration) {
	m.series(dependency).wait.Observe(d.Seconds())
}

// Outcome records how an admitted request ended.
func (m *Metrics) Outcome(dependency string, o bulkhead.Outcome) {
	d := m.series(dependency)
	switch o {
	case bulkhead.Success:
		d.success.Inc()
	case bulkhead.Failure:
		d.failure.Inc()
	default:
		d.aborted.Inc()
	}
}

// ReleaseLag records a permit's hold time beyond its upstream's work.
func (m *Metrics) ReleaseLag(dependency string, d time.Duration) {
	m.series(dependency).releaseLag.Observe(d.Seconds())
}

// Held records how long an in-process call held its permit (the sidecar's
// holds are recorded by Ended).
func (m *Metrics) Held(dependency string, d time.Duration) {
	m.series(dependency).hold.Observe(d.Seconds())
}

// Ended implements permit.Observer: a lease ended by a real release.
func (m *Metrics) Ended(l permit.Lease, src permit.Source, at time.Time) {
	m.released(src).Inc()
	d := m.series(l.Bulkhead)
	d.hold.Observe(at.Sub(l.Acquired).Seconds())
	if src == permit.TTL {
		d.expired.Inc()
	}
}
