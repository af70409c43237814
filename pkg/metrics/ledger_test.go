package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisledger"
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
		{fmt.Errorf("%w: acquire: %w", redisledger.ErrCallerDeadline, context.DeadlineExceeded), "deadline"},
	} {
		reg := prometheus.NewRegistry()
		l, err := metrics.NewLedger(reg, "redis")
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
