package main

import (
	"math"
	"slices"
	"time"
)

// Summary is a latency distribution, in milliseconds.
type Summary struct {
	N      int     `json:"n"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p99_9_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// summarize sorts d in place and summarises it. Quantiles are nearest-rank
// (the smallest sample with at least q of the samples at or below it).
func summarize(d []time.Duration) Summary {
	if len(d) == 0 {
		return Summary{}
	}
	slices.Sort(d)
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	return Summary{
		N:      len(d),
		MeanMs: ms(sum / time.Duration(len(d))),
		P50Ms:  ms(quantile(d, 0.50)),
		P90Ms:  ms(quantile(d, 0.90)),
		P99Ms:  ms(quantile(d, 0.99)),
		P999Ms: ms(quantile(d, 0.999)),
		MaxMs:  ms(d[len(d)-1]),
	}
}

// quantile is the nearest-rank quantile of sorted, non-empty d.
func quantile(d []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(d)))) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// ms converts to float milliseconds, rounded to the microsecond.
func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// merge concatenates per-worker samples.
func merge(parts [][]time.Duration) []time.Duration {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]time.Duration, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
