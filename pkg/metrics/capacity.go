package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// CapacitySource lists this replica's capacity leases at scrape time
// (ledger.redis.capacity_leases): for each bulkhead, the permits it may
// admit from alone now (0 once the lease's end passed here), those in use,
// and the Checks admitted from it since the process started.
// *redisledger.Capacity is one.
type CapacitySource interface {
	EachLease(each func(dependency string, permits, inUse int, admitted uint64))
}

// RegisterCapacity registers the capacity leases' series on reg:
// bulkhead_ledger_lease_permits, bulkhead_ledger_lease_in_use and
// bulkhead_ledger_lease_admitted_total, per bulkhead that holds a lease.
func RegisterCapacity(reg prometheus.Registerer, src CapacitySource) error {
	return reg.Register(&capacityCollector{src: src})
}

var (
	descLeasePermits = prometheus.NewDesc("bulkhead_ledger_lease_permits",
		"Permits this replica's capacity lease lets it admit alone, without a call to Redis (0 once the lease ended here).",
		[]string{"dependency"}, nil)
	descLeaseInUse = prometheus.NewDesc("bulkhead_ledger_lease_in_use",
		"Permits of this replica's capacity lease in use.", []string{"dependency"}, nil)
	descLeaseAdmitted = prometheus.NewDesc("bulkhead_ledger_lease_admitted_total",
		"Checks this replica admitted from its capacity lease (no call to Redis); the others took the per-request path.",
		[]string{"dependency"}, nil)
)

type capacityCollector struct{ src CapacitySource }

func (c *capacityCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLeasePermits
	ch <- descLeaseInUse
	ch <- descLeaseAdmitted
}

func (c *capacityCollector) Collect(ch chan<- prometheus.Metric) {
	c.src.EachLease(func(dep string, permits, inUse int, admitted uint64) {
		ch <- prometheus.MustNewConstMetric(descLeasePermits, prometheus.GaugeValue, float64(permits), dep)
		ch <- prometheus.MustNewConstMetric(descLeaseInUse, prometheus.GaugeValue, float64(inUse), dep)
		ch <- prometheus.MustNewConstMetric(descLeaseAdmitted, prometheus.CounterValue, float64(admitted), dep)
	})
}
