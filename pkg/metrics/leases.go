package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// leaseMetrics are the series of heartbeat leases: adoptions, problems, and
// the age of each bulkhead's oldest permit.
type leaseMetrics struct {
	adopted  *prometheus.CounterVec
	problems *prometheus.CounterVec
	paused   prometheus.Gauge
}

func newLeaseMetrics(reg prometheus.Registerer) (leaseMetrics, error) {
	lm := leaseMetrics{
		adopted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_permits_adopted_total",
			Help: "Permits of running requests taken from their periodic access-log entries: after a restart of the daemon, or after their lease expired while they ran.",
		}, []string{"dependency"}),
		problems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_heartbeat_problems_total",
			Help: "Signs that an Envoy does not keep its permits' leases alive: no_periodic_entries (a long request ended without one), ended_after_expiry (a request ended after its permit was reclaimed), renewed_after_expiry (a periodic entry came after the lease expired).",
		}, []string{"problem"}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulkhead_admissions_paused",
			Help: "1 while admissions are paused: the recovery window after a start (leases.recovery_window), while running requests' permits are adopted.",
		}),
	}
	for _, c := range []prometheus.Collector{lm.adopted, lm.problems, lm.paused} {
		if err := reg.Register(c); err != nil {
			return leaseMetrics{}, err
		}
	}
	for _, p := range permit.HeartbeatProblems() {
		lm.problems.WithLabelValues(string(p))
	}
	return lm, nil
}

// Adopted counts a running request's permit adopted from its periodic entry.
func (m *Metrics) Adopted(dependency string) { m.series(dependency).adopted.Inc() }

// HeartbeatProblem counts a sign that an Envoy does not heartbeat.
func (m *Metrics) HeartbeatProblem(problem permit.HeartbeatProblem) {
	m.leases.problems.WithLabelValues(string(problem)).Inc()
}

// AdmissionsPaused sets bulkhead_admissions_paused.
func (m *Metrics) AdmissionsPaused(paused bool) {
	v := 0.0
	if paused {
		v = 1
	}
	m.leases.paused.Set(v)
}

// OldestSource tells when each bulkhead's oldest live permit was acquired;
// *permit.Memory is one.
type OldestSource interface {
	Oldest() map[string]time.Time
}

// RegisterOldest adds bulkhead_oldest_permit_age_seconds{dependency} to
// reg, read from src at each scrape with now as the clock.
func RegisterOldest(reg prometheus.Registerer, src OldestSource, now func() time.Time) error {
	return reg.Register(&oldestCollector{src: src, now: now})
}

var descOldest = prometheus.NewDesc("bulkhead_oldest_permit_age_seconds",
	"Age of the bulkhead's oldest permit in use (absent when it holds none): a request that runs for long, or a permit whose lease is kept alive with no end.",
	[]string{"dependency"}, nil)

type oldestCollector struct {
	src OldestSource
	now func() time.Time
}

func (c *oldestCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descOldest }

func (c *oldestCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	for dep, t := range c.src.Oldest() {
		ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, max(0, now.Sub(t).Seconds()), dep)
	}
}
