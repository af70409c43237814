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
// Method: the daemon records every permit's hold time (grant in Check to
// release by the access log) in bulkhead_permit_hold_seconds; the upstream
// (in this process) measures its own service time. The phase's hold
// distribution is the difference of two scrapes of that histogram, and
// lag = hold - upstream service time. The histogram's buckets are coarse
// (1, 2, 4, 8 ms, ...), so the report gives both an interpolated estimate
// and a bound that needs no interpolation: since the upstream's time is
// never negative, lag <= hold, and the smallest bucket edge holding 99% of
// the holds bounds the p99 lag from above.
type ReleaseLag struct {
	Holds          int64   `json:"holds"` // permits released in the phase
	MeanHoldMs     float64 `json:"mean_hold_ms"`
	UpstreamMeanMs float64 `json:"upstream_mean_ms"`
	MeanLagMs      float64 `json:"mean_lag_ms"` // exact: histogram sum / count - upstream mean
	// Interpolated within buckets, upstream mean subtracted.
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
	// P99BoundMs: at least 99% of holds were at most this long (a bucket
	// edge), so p99 lag <= P99BoundMs. nil when off the scale (> 32.8 s).
	P99BoundMs *float64 `json:"p99_bound_ms"`
	// Within4ms: share of holds <= 4 ms, a lower bound of the share of
	// lags under the 5 ms goal.
	Within4ms float64 `json:"within_4ms"`
}

const holdMetric = "bulkhead_permit_hold_seconds"

var errNoHolds = errors.New("release lag: no permit released in the phase")

// bucket is one cumulative histogram bucket.
type bucket struct {
	le    float64 // upper edge, seconds (+Inf last)
	count float64 // cumulative
}

// holdBuckets returns the hold histogram of the bench bulkhead, sorted.
func holdBuckets(m *testbed.Metrics) ([]bucket, float64, error) {
	var bs []bucket
	for _, s := range m.Samples(holdMetric + "_bucket") {
		if s.Labels["dependency"] != routeName {
			continue
		}
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil {
			return nil, 0, fmt.Errorf("release lag: bucket le %q: %w", s.Labels["le"], err)
		}
		bs = append(bs, bucket{le: le, count: s.Value})
	}
	if len(bs) == 0 {
		return nil, 0, fmt.Errorf("release lag: no %s series for %q", holdMetric, routeName)
	}
	slices.SortFunc(bs, func(a, b bucket) int { return cmpFloat(a.le, b.le) })
	total, _ := m.Value(holdMetric+"_sum", map[string]string{"dependency": routeName})
	return bs, total, nil
}

// releaseLag computes the phase's lag from scrapes before and after it.
func releaseLag(before, after *testbed.Metrics, upstream time.Duration) (ReleaseLag, error) {
	b0, s0, err := holdBuckets(before)
	if err != nil {
		return ReleaseLag{}, err
	}
	b1, s1, err := holdBuckets(after)
	if err != nil {
		return ReleaseLag{}, err
	}
	if len(b0) != len(b1) {
		return ReleaseLag{}, fmt.Errorf("release lag: bucket layout changed (%d -> %d)", len(b0), len(b1))
	}
	d := make([]bucket, len(b1))
	for i := range b1 {
		d[i] = bucket{le: b1[i].le, count: b1[i].count - b0[i].count}
	}
	n := d[len(d)-1].count
	if n <= 0 {
		return ReleaseLag{}, errNoHolds
	}
	up := float64(upstream) / float64(time.Millisecond)
	meanHold := (s1 - s0) / n * 1000
	lag := ReleaseLag{
		Holds:          int64(n),
		MeanHoldMs:     round3(meanHold),
		UpstreamMeanMs: round3(up),
		MeanLagMs:      round3(meanHold - up),
		P50Ms:          round3(max(interpolate(d, 0.50)*1000-up, 0)),
		P90Ms:          round3(max(interpolate(d, 0.90)*1000-up, 0)),
		P99Ms:          round3(max(interpolate(d, 0.99)*1000-up, 0)),
	}
	for _, b := range d {
		if b.count >= 0.99*n && !math.IsInf(b.le, 1) {
			bound := b.le * 1000
			lag.P99BoundMs = &bound
			break
		}
	}
	for _, b := range d {
		if b.le <= 0.004+1e-12 {
			lag.Within4ms = round3(b.count / n)
		}
	}
	return lag, nil
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
