package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
)

func TestBreakerSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	set := breaker.NewSet(clock.NewFake(time.Unix(1000, 0)))
	set.Apply(map[string]breaker.Settings{"catalog": {FailureRatio: 0.5, MinRequests: 1, Window: time.Second, OpenFor: time.Second, HalfOpenProbes: 1},
		"orders": {FailureRatio: 0.5, MinRequests: 1, Window: time.Second, OpenFor: time.Second, HalfOpenProbes: 1}})
	set.Record("catalog", true, 0)
	set.Get("orders").SetMode(breaker.ForceClosed)
	if err := metrics.RegisterBreakers(reg, set); err != nil {
		t.Fatal(err)
	}
	fams := gather(t, reg)
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"bulkhead_circuit_state", []string{"dependency", "catalog"}, 1},
		{"bulkhead_circuit_state", []string{"dependency", "orders"}, 0},
		{"bulkhead_circuit_forced", []string{"dependency", "orders"}, -1},
		{"bulkhead_circuit_transitions_total", []string{"dependency", "catalog", "to", "open"}, 1},
		{"bulkhead_circuit_transitions_total", []string{"dependency", "catalog", "to", "closed"}, 0},
	} {
		if got, ok := value(fams, tt.name, tt.labels...); !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
}
