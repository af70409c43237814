package callmetrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation/callmetrics"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSidecarSeries: a semaphore over a registry's limiter and a pool,
// reported through the sidecar's collectors.
func TestSidecarSeries(t *testing.T) {
	bh := bulkhead.NewRegistry()
	if _, err := bh.Apply(map[string]bulkhead.Settings{"auth": {MaxConcurrent: 2}}); err != nil {
		t.Fatal(err)
	}
	// The observer needs the metrics, the metrics need the pools: give
	// metrics.New a pointer to a Group filled before anything is served.
	var pools isolation.Group
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, isolation.Sources{bh, &pools})
	if err != nil {
		t.Fatal(err)
	}
	obs := callmetrics.New(m)
	sem := isolation.NewSemaphore(bh.Get("auth"), isolation.WithObserver(obs))
	pool, err := isolation.NewPool("catalog", bulkhead.Settings{MaxConcurrent: 3, MaxQueue: 5}, isolation.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(context.Background())
	pools = append(pools, pool)

	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	fail := func(context.Context) error { return errors.New("down") }
	for _, call := range []func(context.Context) error{ok, ok, fail} {
		_ = sem.Execute(ctx, bulkhead.Critical, call)
		_ = pool.Execute(ctx, bulkhead.Normal, call)
	}

	want := `
# HELP bulkhead_limit The bulkhead's max_concurrent.
# TYPE bulkhead_limit gauge
bulkhead_limit{dependency="auth"} 2
bulkhead_limit{dependency="catalog"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "bulkhead_limit"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		metric string
		labels []string
		want   float64
	}{
		{"bulkhead_admitted_total", []string{"auth", "critical"}, 3},
		{"bulkhead_admitted_total", []string{"catalog", "normal"}, 3},
		{"bulkhead_active_calls", []string{"catalog"}, 0},
		{"bulkhead_success_total", []string{"auth"}, 2},
		{"bulkhead_failure_total", []string{"auth"}, 1},
		{"bulkhead_success_total", []string{"catalog"}, 2},
		{"bulkhead_failure_total", []string{"catalog"}, 1},
	} {
		if got := value(t, reg, tt.metric, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.metric, tt.labels, got, tt.want)
		}
	}
	if n := histogramCount(t, reg, "bulkhead_wait_seconds", "auth"); n != 3 {
		t.Errorf("auth waits observed: %d", n)
	}
}

type holdRecorder struct {
	waits, outcomes, holds int
}

func (h *holdRecorder) Waited(string, time.Duration)     { h.waits++ }
func (h *holdRecorder) Outcome(string, bulkhead.Outcome) { h.outcomes++ }
func (h *holdRecorder) Held(string, time.Duration)       { h.holds++ }

func TestHoldRecorder(t *testing.T) {
	h := &holdRecorder{}
	o := callmetrics.New(h)
	o.Admitted("x", time.Millisecond)
	o.Finished("x", time.Second, false)
	if h.waits != 1 || h.outcomes != 1 || h.holds != 1 {
		t.Fatalf("%+v", h)
	}
}

func value(t *testing.T, reg *prometheus.Registry, name string, labels []string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i, lp := range m.GetLabel() {
				if i >= len(labels) || lp.GetValue() != labels[i] {
					continue next
				}
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("%s%v not found", name, labels)
	return 0
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name, dep string) uint64 {
	t.Helper()
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == dep {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}
