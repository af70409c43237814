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
	descEnforced = prometheus.NewDesc("bulkhead_enforced",
		"1 while the bulkhead enforces its limit, 0 in a dry run (enforce: false).", []string{"dependency"}, nil)
	descWouldReject = prometheus.NewDesc("bulkhead_would_reject_total",
		"Requests a dry-run bulkhead admitted that it would have rejected had it enforced its limit, by reason.",
		[]string{"dependency", "reason"}, nil)
	descWouldQueue = prometheus.NewDesc("bulkhead_would_queue_calls",
		"Admitted requests of a dry-run bulkhead that would be waiting now had it enforced its limit.", []string{"dependency"}, nil)
	descOverloaded = prometheus.NewDesc("bulkhead_queue_overloaded",
		"1 while the bulkhead's CoDel queue is overloaded (newest served first, waits cut to the target).", []string{"dependency"}, nil)
	descRecovering = prometheus.NewDesc("bulkhead_ledger_recovering",
		"1 while the bulkhead's recovery window in the shared ledger holds admissions: Redis had no state for it (first use, a restart without persistence, a failover that lost it) and the running requests' heartbeats are rebuilding its count; 0 otherwise (always with the in-memory ledger).",
		[]string{"dependency"}, nil)
	descCancelled = prometheus.NewDesc("bulkhead_cancelled_total",
		"Checks that ended while waiting because Envoy or the client went away.", []string{"dependency"}, nil)
)

// snapshotCollector reports limiter state from snapshots at scrape time.
type snapshotCollector struct {
	src SnapshotSource
	m   *Metrics
}

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRecovering, descActive, descQueued, descLimit, descMaxQueue, descAdmitted, descRejected, descCancelled,
		descEnforced, descWouldReject, descWouldQueue, descOverloaded, descTenants, descTenantsEvicted, descTenantRejected, descKind} {
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
		inUse, queued, recovering := s.InUse, s.QueuedTotal(), 0.0
		if c.m.global != nil {
			if g, ok := c.m.global.Global(s.Name); ok {
				// The Redis ledger: every replica's permits, as Redis counts them.
				inUse, queued = g.InUse, g.Queued[0]+g.Queued[1]+g.Queued[2]
				if g.Recovering {
					recovering = 1
				}
			}
		}
		gauge(descRecovering, recovering, s.Name)
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
		enforced := 1.0
		if s.Settings.DryRun {
			enforced = 0
		}
		gauge(descEnforced, enforced, s.Name)
		gauge(descWouldQueue, float64(s.WouldQueue), s.Name)
		overloaded := 0.0
		if s.Overloaded {
			overloaded = 1
		}
		gauge(descOverloaded, overloaded, s.Name)
		for _, r := range bulkhead.Reasons() {
			counter(descWouldReject, s.WouldReject[r], s.Name, r.String())
		}
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
