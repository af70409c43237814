package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

var (
	descActive = prometheus.NewDesc("bulkhead_active_calls",
		"Permits in use (requests admitted and not yet released).", []string{"dependency"}, nil)
	descQueued = prometheus.NewDesc("bulkhead_queued_calls",
		"Requests waiting for a permit.", []string{"dependency"}, nil)
	descLimit = prometheus.NewDesc("bulkhead_limit",
		"The bulkhead's max_concurrent.", []string{"dependency"}, nil)
	descMaxQueue = prometheus.NewDesc("bulkhead_queue_limit",
		"The bulkhead's max_queue.", []string{"dependency"}, nil)
	descAdmitted = prometheus.NewDesc("bulkhead_admitted_total",
		"Requests granted a permit.", []string{"dependency", "priority"}, nil)
	descRejected = prometheus.NewDesc("bulkhead_rejected_total",
		"Requests rejected, by reason.", []string{"dependency", "reason"}, nil)
	descTenants = prometheus.NewDesc("bulkhead_tenants",
		"Live tenant sub-bulkheads (tenant values are never labels).", []string{"dependency"}, nil)
	descTenantsEvicted = prometheus.NewDesc("bulkhead_tenants_evicted_total",
		"Idle tenant sub-bulkheads evicted to stay within limits.max_tenants.", []string{"dependency"}, nil)
	descTenantRejected = prometheus.NewDesc("bulkhead_tenant_rejected_total",
		"Requests rejected by their tenant's compartment (all tenants together), by reason.", []string{"dependency", "reason"}, nil)
	descCancelled = prometheus.NewDesc("bulkhead_cancelled_total",
		"Checks that ended while waiting because Envoy or the client went away.", []string{"dependency"}, nil)
)

// snapshotCollector reports limiter state from snapshots at scrape time.
type snapshotCollector struct {
	src SnapshotSource
	m   *Metrics
}

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descActive, descQueued, descLimit, descMaxQueue, descAdmitted, descRejected, descCancelled,
		descTenants, descTenantsEvicted, descTenantRejected, descKind} {
		ch <- d
	}
}

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, s := range c.src.Snapshots() {
		inUse, queued := s.InUse, s.QueuedTotal()
		if g, ok := c.m.ledger.Global(s.Name); ok {
			// A shared ledger: every replica's permits, as Redis counts them.
			inUse, queued = g.InUse, g.Queued[0]+g.Queued[1]+g.Queued[2]
		}
		gauge(descActive, float64(inUse), s.Name)
		gauge(descQueued, float64(queued), s.Name)
		gauge(descLimit, float64(s.Settings.MaxConcurrent), s.Name)
		if k := c.m.kindOf(s.Name); k != "" {
			gauge(descKind, 1, s.Name, k)
		}
		gauge(descMaxQueue, float64(s.Settings.MaxQueue), s.Name)
		for _, p := range bulkhead.Priorities() {
			counter(descAdmitted, s.Admitted[p], s.Name, p.String())
		}
		for _, r := range bulkhead.Reasons() {
			counter(descRejected, s.Rejected[r], s.Name, r.String())
		}
		counter(descCancelled, s.Cancelled, s.Name)
		if t := s.Tenants; t != nil {
			gauge(descTenants, float64(t.Live), s.Name)
			counter(descTenantsEvicted, t.Evicted, s.Name)
			for _, r := range bulkhead.Reasons() {
				counter(descTenantRejected, t.Rejected[r], s.Name, r.String())
			}
		}
	}
	counter(descRejected, c.m.unknownRejected.Load(), UnknownDependency, bulkhead.ReasonUnknownBulkhead.String())
}
