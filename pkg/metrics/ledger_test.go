package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
)

// A call that the Check's own deadline cut short is counted apart from
// Redis's timeouts: it says nothing of Redis.
func TestLedgerCallResult(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{errors.New("NOPERM"), "error"},
		{context.DeadlineExceeded, "timeout"},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, "timeout"},
		{fmt.Errorf("%w: acquire: %w", admission.ErrCallerDeadline, context.DeadlineExceeded), "deadline"},
	} {
		reg := prometheus.NewRegistry()
		l, err := metrics.NewLedgerMetrics(reg, "redis")
		if err != nil {
			t.Fatal(err)
		}
		l.LedgerCall(admission.OpAcquire, 0, tc.err)
		got := callsByResult(t, reg, admission.OpAcquire)
		for _, r := range []string{"ok", "error", "timeout", "deadline"} {
			want := 0.0
			if r == tc.want {
				want = 1
			}
			if v, ok := got[r]; !ok || v != want {
				t.Errorf("%v: result %q counted %v (present: %v), want %v", tc.err, r, v, ok, want)
			}
		}
	}
}

// callsByResult reads bulkhead_ledger_calls_total of op by result.
func callsByResult(t *testing.T, reg *prometheus.Registry, op admission.Op) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "bulkhead_ledger_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["op"] == string(op) {
				got[labels["result"]] = m.GetCounter().GetValue()
			}
		}
	}
	return got
}

type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }

// globalCounts is a GlobalSource that knows the bulkheads in it.
type globalCounts map[string]admission.Global

func (g globalCounts) Global(name string) (admission.Global, bool) {
	v, ok := g[name]
	return v, ok
}

// With a GlobalSource, the bulkhead gauges report every replica's counts
// where it has them, and this process's own elsewhere.
func TestGlobalCounts(t *testing.T) {
	reg, bh := prometheus.NewRegistry(), bulkhead.NewRegistry()
	if _, err := bh.Apply(map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 10}, "orders": {MaxConcurrent: 10}}); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(reg, bh)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bh.Get("orders").Acquire(context.Background(), bulkhead.Normal); err != nil {
		t.Fatal(err)
	}
	m.UseGlobal(globalCounts{"catalog": {InUse: 7, Queued: [3]int{1, 2, 3}, Recovering: true}})
	fams := gather(t, reg)
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"bulkhead_active_calls", []string{"dependency", "catalog"}, 7},
		{"bulkhead_queued_calls", []string{"dependency", "catalog"}, 6},
		{"bulkhead_ledger_recovering", []string{"dependency", "catalog"}, 1},
		{"bulkhead_active_calls", []string{"dependency", "orders"}, 1}, // not known globally: this process's
		{"bulkhead_ledger_recovering", []string{"dependency", "orders"}, 0},
	} {
		if got, ok := value(fams, tt.name, tt.labels...); !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
}
