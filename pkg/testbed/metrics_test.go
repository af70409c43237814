package testbed

import (
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const sampleExposition = `# HELP bulkhead_active_calls Permits held.
# TYPE bulkhead_active_calls gauge
bulkhead_active_calls{dependency="auth"} 3
bulkhead_active_calls{dependency="catalog"} 10
# HELP bulkhead_rejected_total Rejections.
# TYPE bulkhead_rejected_total counter
bulkhead_rejected_total{dependency="catalog",reason="queue_full"} 41
bulkhead_rejected_total{dependency="catalog",reason="shed"} 7
bulkhead_rejected_total{dependency="auth",reason="timeout"} 1 1712345678000
bulkhead_rejected_total{ dependency = "odd\"name\\x\n" , reason="shed", } 2
# TYPE bulkhead_wait_seconds histogram
bulkhead_wait_seconds_bucket{dependency="catalog",le="0.005"} 3
bulkhead_wait_seconds_bucket{dependency="catalog",le="+Inf"} 9
bulkhead_wait_seconds_sum{dependency="catalog"} 1.5e-01
bulkhead_wait_seconds_count{dependency="catalog"} 9
{"utf8.metric", "label.name"="x"} NaN
go_goroutines 17
process_max_fds +Inf
`

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(sampleExposition))
	if err != nil {
		t.Fatal(err)
	}
	values := []struct {
		name   string
		labels map[string]string
		want   float64
		ok     bool
	}{
		{"bulkhead_active_calls", map[string]string{"dependency": "catalog"}, 10, true},
		{"bulkhead_active_calls", map[string]string{"dependency": "orders"}, 0, false},
		{"bulkhead_active_calls", nil, 0, false},
		{"bulkhead_rejected_total", map[string]string{"dependency": "auth", "reason": "timeout"}, 1, true},
		{"bulkhead_rejected_total", map[string]string{"dependency": "catalog"}, 0, false},
		{"bulkhead_rejected_total", map[string]string{"dependency": "odd\"name\\x\n", "reason": "shed"}, 2, true},
		{"bulkhead_wait_seconds_bucket", map[string]string{"dependency": "catalog", "le": "+Inf"}, 9, true},
		{"bulkhead_wait_seconds_sum", map[string]string{"dependency": "catalog"}, 0.15, true},
		{"go_goroutines", nil, 17, true},
		{"go_goroutines", map[string]string{}, 17, true},
		{"process_max_fds", nil, math.Inf(1), true},
		{"missing", nil, 0, false},
	}
	for _, tc := range values {
		got, ok := m.Value(tc.name, tc.labels)
		if ok != tc.ok || got != tc.want {
			t.Errorf("Value(%s, %v) = %v, %v; want %v, %v", tc.name, tc.labels, got, ok, tc.want, tc.ok)
		}
	}
	if v, ok := m.Value("utf8.metric", map[string]string{"label.name": "x"}); !ok || !math.IsNaN(v) {
		t.Errorf("quoted name: %v, %v; want NaN, true", v, ok)
	}
	sums := []struct {
		name   string
		subset map[string]string
		want   float64
	}{
		{"bulkhead_rejected_total", map[string]string{"dependency": "catalog"}, 48},
		{"bulkhead_rejected_total", map[string]string{"reason": "shed"}, 9},
		{"bulkhead_rejected_total", nil, 51},
		{"bulkhead_active_calls", nil, 13},
		{"bulkhead_rejected_total", map[string]string{"dependency": "orders"}, 0},
		{"missing", nil, 0},
	}
	for _, tc := range sums {
		if got := m.Sum(tc.name, tc.subset); got != tc.want {
			t.Errorf("Sum(%s, %v) = %v, want %v", tc.name, tc.subset, got, tc.want)
		}
	}
	if n := len(m.Samples("bulkhead_rejected_total")); n != 4 {
		t.Errorf("Samples(bulkhead_rejected_total) has %d, want 4", n)
	}
}

func TestParseMetricsErrors(t *testing.T) {
	for _, text := range []string{
		`x{a="b"`,
		`x{a="b} 1`,
		`x{a} 1`,
		`x{a=b} 1`,
		`x`,
		`x 1 2 3`,
		`x one`,
		`{a="b"} 1`,
		`{"n", "m"} 1`,
		`x{a="\`,
	} {
		if _, err := ParseMetrics(strings.NewReader(text + "\n")); !errors.Is(err, ErrMetricsFormat) {
			t.Errorf("ParseMetrics(%q) error = %v, want ErrMetricsFormat", text, err)
		}
	}
}

func FuzzParseMetrics(f *testing.F) {
	f.Add(sampleExposition)
	f.Add(`x{a="\n\\\""} 1`)
	f.Fuzz(func(t *testing.T, text string) {
		m, err := ParseMetrics(strings.NewReader(text))
		if err == nil {
			_ = m.Sum("x", map[string]string{"a": "b"})
		}
	})
}

func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("content-type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(sampleExposition))
	}))
	defer srv.Close()
	ctx := testCtx(t, 10*time.Second)
	m, err := Scrape(ctx, srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.Value("go_goroutines", nil); !ok || v != 17 {
		t.Errorf("go_goroutines = %v, %v", v, ok)
	}
	if _, err := Scrape(ctx, srv.URL+"/nope"); !errors.Is(err, ErrScrape) {
		t.Errorf("Scrape(404) error = %v, want ErrScrape", err)
	}
}

// TestScrapeClientGolang reads what client_golang's promhttp serves (the
// daemon's /metrics), histograms and escaped label values included.
func TestScrapeClientGolang(t *testing.T) {
	reg := prometheus.NewRegistry()
	active := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bulkhead_active_calls", Help: "h"}, []string{"dependency"})
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bulkhead_rejected_total", Help: "h"}, []string{"dependency", "reason"})
	wait := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bulkhead_wait_seconds", Help: "h", Buckets: []float64{0.01, 0.1}}, []string{"dependency"})
	reg.MustRegister(active, rejected, wait)
	active.WithLabelValues("catalog").Set(10)
	active.WithLabelValues(`we"ird\n`).Set(1)
	rejected.WithLabelValues("catalog", "shed").Add(3)
	rejected.WithLabelValues("catalog", "timeout").Add(4)
	wait.WithLabelValues("catalog").Observe(0.05)
	wait.WithLabelValues("catalog").Observe(1)

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	m, err := Scrape(testCtx(t, 10*time.Second), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"bulkhead_active_calls", map[string]string{"dependency": "catalog"}, 10},
		{"bulkhead_active_calls", map[string]string{"dependency": `we"ird\n`}, 1},
		{"bulkhead_rejected_total", map[string]string{"dependency": "catalog", "reason": "timeout"}, 4},
		{"bulkhead_wait_seconds_bucket", map[string]string{"dependency": "catalog", "le": "0.1"}, 1},
		{"bulkhead_wait_seconds_bucket", map[string]string{"dependency": "catalog", "le": "+Inf"}, 2},
		{"bulkhead_wait_seconds_count", map[string]string{"dependency": "catalog"}, 2},
		{"bulkhead_wait_seconds_sum", map[string]string{"dependency": "catalog"}, 1.05},
	}
	for _, tc := range checks {
		if got, ok := m.Value(tc.name, tc.labels); !ok || got != tc.want {
			t.Errorf("Value(%s, %v) = %v, %v; want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	if got := m.Sum("bulkhead_rejected_total", map[string]string{"dependency": "catalog"}); got != 7 {
		t.Errorf("Sum(rejected, catalog) = %v, want 7", got)
	}
}
