package metrics_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
)

// TestDryRunSeries: a dry-run bulkhead reports enforced 0 and, by reason,
// what it would have rejected; an enforcing one reports enforced 1 and
// would-reject series at 0.
func TestDryRunSeries(t *testing.T) {
	reg, bh := prometheus.NewRegistry(), bulkhead.NewRegistry()
	if _, err := bh.Apply(map[string]bulkhead.Settings{
		"catalog": {MaxConcurrent: 1},
		"orders":  {MaxConcurrent: 1, MaxQueue: 1, DryRun: true},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg, bh); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := bh.Get("orders").Acquire(context.Background(), bulkhead.Normal); err != nil {
			t.Fatalf("dry run rejected: %v", err)
		}
	}
	fams := gather(t, reg)
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"bulkhead_enforced", []string{"dependency", "catalog"}, 1},
		{"bulkhead_enforced", []string{"dependency", "orders"}, 0},
		{"bulkhead_active_calls", []string{"dependency", "orders"}, 3},
		{"bulkhead_would_queue_calls", []string{"dependency", "orders"}, 1},
		{"bulkhead_would_reject_total", []string{"dependency", "orders", "reason", "queue_full"}, 1},
		{"bulkhead_would_reject_total", []string{"dependency", "orders", "reason", "timeout"}, 0},
		{"bulkhead_would_reject_total", []string{"dependency", "catalog", "reason", "queue_full"}, 0},
		{"bulkhead_rejected_total", []string{"dependency", "orders", "reason", "queue_full"}, 0},
		{"bulkhead_queue_overloaded", []string{"dependency", "orders"}, 0},
	} {
		if got, ok := value(fams, tt.name, tt.labels...); !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
}
