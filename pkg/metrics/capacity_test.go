package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
)

type leases map[string][3]int

func (l leases) EachLease(each func(dependency string, permits, inUse int, admitted uint64)) {
	for name, v := range l {
		each(name, v[0], v[1], uint64(v[2]))
	}
}

func TestCapacitySeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := metrics.RegisterCapacity(reg, leases{"catalog": {5, 2, 40}, "orders": {0, 1, 3}}); err != nil {
		t.Fatal(err)
	}
	fams := gather(t, reg)
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"bulkhead_ledger_lease_permits", []string{"dependency", "catalog"}, 5},
		{"bulkhead_ledger_lease_in_use", []string{"dependency", "catalog"}, 2},
		{"bulkhead_ledger_lease_admitted_total", []string{"dependency", "catalog"}, 40},
		{"bulkhead_ledger_lease_permits", []string{"dependency", "orders"}, 0},
		{"bulkhead_ledger_lease_in_use", []string{"dependency", "orders"}, 1},
		{"bulkhead_ledger_lease_admitted_total", []string{"dependency", "orders"}, 3},
	} {
		if got, ok := value(fams, tt.name, tt.labels...); !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
}
