package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseStatCPU(t *testing.T) {
	tests := []struct {
		name string
		stat string
		want time.Duration
		ok   bool
	}{
		{"plain", "4242 (envoy) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 100 0 0", 3 * time.Second, true},
		{"spaces and parens in the name", "7 (a b) (c)) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 1 0 0", 30 * time.Millisecond, true},
		{"truncated", "7 (x) R 1 2 3", 0, false},
		{"no name", "7 x R", 0, false},
		{"not a number", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 a 2 0", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatCPU([]byte(tt.stat))
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("parseStatCPU = %v, %v; want %v, ok=%v", got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestParseStatusMemory(t *testing.T) {
	status := "Name:\tbulkhead\nVmPeak:\t 1000 kB\nVmHWM:\t   30000 kB\nVmRSS:\t   20000 kB\nThreads:\t9\n"
	rss, peak, err := parseStatusMemory([]byte(status))
	if err != nil || rss != 20000<<10 || peak != 30000<<10 {
		t.Fatalf("parseStatusMemory = %d, %d, %v", rss, peak, err)
	}
	if _, _, err := parseStatusMemory([]byte("Name:\tx\n")); err == nil {
		t.Fatal("no VmRSS: want an error")
	}
}

func TestParseMachineCPU(t *testing.T) {
	busy, steal, err := parseMachineCPU([]byte("cpu  100 5 20 1000 7 3 2 9 0 0\ncpu0 1 2 3\n"))
	if err != nil || busy != 1300*time.Millisecond || steal != 90*time.Millisecond {
		t.Fatalf("parseMachineCPU = %v, %v, %v; want 1.3s, 90ms", busy, steal, err)
	}
	if _, _, err := parseMachineCPU([]byte("intr 1 2\n")); err == nil {
		t.Fatal("want an error without the cpu line")
	}
}

func TestSummarize(t *testing.T) {
	var d []time.Duration
	for i := 1000; i >= 1; i-- { // reversed: summarize sorts
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	s := summarize(d)
	want := Summary{N: 1000, MeanMs: 500.5, P50Ms: 500, P90Ms: 900, P99Ms: 990, P999Ms: 999, MaxMs: 1000}
	if s != want {
		t.Fatalf("summarize = %+v, want %+v", s, want)
	}
	if got := summarize(nil); got != (Summary{}) {
		t.Fatalf("summarize(nil) = %+v", got)
	}
}

func TestReleaseLag(t *testing.T) {
	scrape := func(counts [4]int, sum float64, holds int, holdSum float64) *testbed.Metrics {
		text := `# TYPE bulkhead_permit_release_lag_seconds histogram
bulkhead_permit_release_lag_seconds_bucket{dependency="bench",le="0.001"} ` + itoa(counts[0]) + `
bulkhead_permit_release_lag_seconds_bucket{dependency="bench",le="0.002"} ` + itoa(counts[1]) + `
bulkhead_permit_release_lag_seconds_bucket{dependency="bench",le="0.005"} ` + itoa(counts[2]) + `
bulkhead_permit_release_lag_seconds_bucket{dependency="bench",le="+Inf"} ` + itoa(counts[3]) + `
bulkhead_permit_release_lag_seconds_sum{dependency="bench"} ` + ftoa(sum) + `
bulkhead_permit_release_lag_seconds_count{dependency="bench"} ` + itoa(counts[3]) + `
bulkhead_permit_release_lag_seconds_bucket{dependency="other",le="+Inf"} 999
# TYPE bulkhead_permit_hold_seconds histogram
bulkhead_permit_hold_seconds_bucket{dependency="bench",le="+Inf"} ` + itoa(holds) + `
bulkhead_permit_hold_seconds_sum{dependency="bench"} ` + ftoa(holdSum) + `
bulkhead_permit_hold_seconds_count{dependency="bench"} ` + itoa(holds) + `
`
		m, err := testbed.ParseMetrics(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := scrape([4]int{10, 10, 10, 10}, 0.005, 10, 0.5)
	// The phase: 50 lags <= 1ms, 40 in (1,2], 9 in (2,5], 1 above 5ms; 0.14 s in all;
	// 100 holds of 0.6 s in all.
	after := scrape([4]int{60, 100, 109, 110}, 0.145, 110, 0.65)
	lag, err := releaseLag(before, after, 100*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	if lag.Releases != 100 || lag.MeanLagMs != 1.4 || lag.MeanHoldMs != 1.5 || lag.UpstreamMeanMs != 0.1 {
		t.Fatalf("counts and means: %+v", lag)
	}
	// p50: rank 50, the end of the first bucket.
	if lag.P50Ms != 1 {
		t.Errorf("p50 = %v, want 1", lag.P50Ms)
	}
	// p99: rank 99, the last lag of the (2,5] bucket.
	if lag.P99Ms != 5 || lag.P99BoundMs == nil || *lag.P99BoundMs != 5 || lag.Within5ms != 0.99 {
		t.Errorf("p99 = %v, bound %v, within 5ms %v; want 5, 5, 0.99", lag.P99Ms, lag.P99BoundMs, lag.Within5ms)
	}
	if lag.Within2ms != 0.9 {
		t.Errorf("within 2ms = %v, want 0.9", lag.Within2ms)
	}
	if _, err := releaseLag(before, before, 0); err == nil {
		t.Error("no releases in the phase: want an error")
	}
}

func TestParseBench(t *testing.T) {
	out := `goos: linux
pkg: github.com/bulkhead-mesh/bulkhead/pkg/bulkhead
BenchmarkAcquireRelease-2               	 8130164	        44.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkAcquireRelease-2               	 8130164	        40.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkAcquireRelease-2               	 8130164	        60.00 ns/op	       0 B/op	       0 allocs/op
PASS
pkg: github.com/bulkhead-mesh/bulkhead/pkg/authz
BenchmarkCheckBulkheads/bulkheads=10-2  	  189014	      2256 ns/op	     939 B/op	      13 allocs/op
ok  	github.com/bulkhead-mesh/bulkhead/pkg/authz	4.383s
`
	ms, err := parseBench(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("got %d benchmarks: %+v", len(ms), ms)
	}
	a := findMicro(ms, "BenchmarkAcquireRelease")
	if a == nil || a.Runs != 3 || a.NsPerOp != 44 || a.Package != "github.com/bulkhead-mesh/bulkhead/pkg/bulkhead" {
		t.Errorf("AcquireRelease = %+v", a)
	}
	c := findMicro(ms, "BenchmarkCheckBulkheads/bulkheads=10")
	if c == nil || c.NsPerOp != 2256 || c.BytesPerOp != 939 || c.AllocsPerOp != 13 {
		t.Errorf("CheckBulkheads = %+v", c)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
