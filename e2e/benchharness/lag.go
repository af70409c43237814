package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// ReleaseLag is how long permits were held beyond the upstream's own work,
// over one phase.
//
// Method: for every permit the access log releases, the daemon records its
// hold time (grant in Check to release) less the upstream's time in the
// same entry (Envoy's first byte sent upstream to the last received), in
// bulkhead_permit_release_lag_seconds. The phase's distribution is the
// difference of two scrapes of that histogram. Its buckets (0.25, 0.5, 1,
// 2, 3, 4, 5, 7.5, 10 ms, ...) give an interpolated estimate of each
// quantile and a bound that needs no interpolation: the smallest edge
// under which 99% of the lags fell. The mean is exact (sum / count).
type ReleaseLag struct {
	Releases  int64   `json:"releases"` // permits released by the access log in the phase
	MeanLagMs float64 `json:"mean_lag_ms"`
	// Interpolated within buckets.
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
	// P99BoundMs: at least 99% of lags were at most this long (a bucket
	// edge). nil when off the scale (> 5 s).
	P99BoundMs *float64 `json:"p99_bound_ms"`
	// Within2ms and Within5ms: shares of lags <= 2 ms and <= 5 ms (bucket
	// edges: exact). 2 ms is the goal's bound.
	Within2ms float64 `json:"within_2ms"`
	Within5ms float64 `json:"within_5ms"`
	// Context: the mean hold (bulkhead_permit_hold_seconds) and the mean
	// service time the upstream measured itself.
	MeanHoldMs     float64 `json:"mean_hold_ms"`
	UpstreamMeanMs float64 `json:"upstream_mean_ms"`
}

const (
	lagMetric  = "bulkhead_permit_release_lag_seconds"
	holdMetric = "bulkhead_permit_hold_seconds"
)

var errNoHolds = errors.New("release lag: no permit released by the access log in the phase")

// bucket is one cumulative histogram bucket.
type bucket struct {
	le    float64 // upper edge, seconds (+Inf last)
	count float64 // cumulative
}

// histogram returns the buckets (sorted) and sum of the bench bulkhead's
// series of histogram name.
func histogram(m *testbed.Metrics, name string) ([]bucket, float64, error) {
	var bs []bucket
	for _, s := range m.Samples(name + "_bucket") {
		if s.Labels["dependency"] != routeName {
			continue
		}
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: bucket le %q: %w", name, s.Labels["le"], err)
		}
		bs = append(bs, bucket{le: le, count: s.Value})
	}
	if len(bs) == 0 {
		return nil, 0, fmt.Errorf("no %s series for %q", name, routeName)
	}
	slices.SortFunc(bs, func(a, b bucket) int { return cmpFloat(a.le, b.le) })
	total, _ := m.Value(name+"_sum", map[string]string{"dependency": routeName})
	return bs, total, nil
}

// phaseHistogram is histogram name over a phase: after less before.
func phaseHistogram(before, after *testbed.Metrics, name string) ([]bucket, float64, error) {
	b0, s0, err := histogram(before, name)
	if err != nil {
		return nil, 0, err
	}
	b1, s1, err := histogram(after, name)
	if err != nil {
		return nil, 0, err
	}
	if len(b0) != len(b1) {
		return nil, 0, fmt.Errorf("%s: bucket layout changed (%d -> %d)", name, len(b0), len(b1))
	}
	d := make([]bucket, len(b1))
	for i := range b1 {
		d[i] = bucket{le: b1[i].le, count: b1[i].count - b0[i].count}
	}
	return d, s1 - s0, nil
}

// releaseLag computes the phase's lag from scrapes before and after it;
// upstream is the upstream's own mean service time, for context.
func releaseLag(before, after *testbed.Metrics, upstream time.Duration) (ReleaseLag, error) {
	d, sum, err := phaseHistogram(before, after, lagMetric)
	if err != nil {
		return ReleaseLag{}, err
	}
	n := d[len(d)-1].count
	if n <= 0 {
		return ReleaseLag{}, errNoHolds
	}
	lag := ReleaseLag{
		Releases:       int64(n),
		MeanLagMs:      round3(sum / n * 1000),
		P50Ms:          round3(interpolate(d, 0.50) * 1000),
		P90Ms:          round3(interpolate(d, 0.90) * 1000),
		P99Ms:          round3(interpolate(d, 0.99) * 1000),
		UpstreamMeanMs: round3(float64(upstream) / float64(time.Millisecond)),
	}
	if h, hsum, err := phaseHistogram(before, after, holdMetric); err == nil && h[len(h)-1].count > 0 {
		lag.MeanHoldMs = round3(hsum / h[len(h)-1].count * 1000)
	}
	for _, b := range d {
		if b.count >= 0.99*n && !math.IsInf(b.le, 1) {
			bound := b.le * 1000
			lag.P99BoundMs = &bound
			break
		}
	}
	lag.Within2ms, lag.Within5ms = within(d, 0.002), within(d, 0.005)
	return lag, nil
}

// within is the share of cumulative buckets d at or under edge seconds
// (exact when edge is a bucket edge; else the share under the edge below).
func within(d []bucket, edge float64) float64 {
	n, share := d[len(d)-1].count, 0.0
	for _, b := range d {
		if b.le <= edge+1e-12 {
			share = round3(b.count / n)
		}
	}
	return share
}

// interpolate is the q quantile of cumulative buckets d, linear within the
// bucket it falls in (the first bucket starts at 0). In the +Inf bucket it
// returns the last finite edge, a lower bound.
func interpolate(d []bucket, q float64) float64 {
	n := d[len(d)-1].count
	rank := q * n
	lo, below := 0.0, 0.0
	for _, b := range d {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				return lo
			}
			in := b.count - below
			if in <= 0 {
				return b.le
			}
			return lo + (b.le-lo)*(rank-below)/in
		}
		lo, below = b.le, b.count
	}
	return lo
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
