package testbed

import (
	"math"
	"net/http"
	"slices"
	"time"
)

// Stats are the counts and latencies of a Load: over its whole run (Run's
// result), so far (Snapshot, without latencies) or over one window
// (TakeWindow). A Stats value is not shared after it is returned.
type Stats struct {
	// Sent is the number of requests started; NotSent the number due by the
	// schedule but skipped because MaxOutstanding requests were already out.
	Sent, NotSent int
	// Outstanding is the number of requests started and not yet finished
	// (always 0 in Run's result).
	Outstanding int
	// ByStatus counts responses by HTTP status.
	ByStatus map[int]int
	// ByReason counts responses by their x-bulkhead-reason header value
	// (responses without the header are not counted).
	ByReason map[string]int
	// TransportErrors counts requests that got no HTTP response (refused,
	// reset, client timeout, cancelled).
	TransportErrors int
	// Cancelled counts requests cut short because Run's ctx ended.
	Cancelled int
	// Rejections counts responses with status 503; MalformedRejections those
	// of them missing retry-after or x-bulkhead-reason.
	Rejections, MalformedRejections int
	// Latencies of requests that got a response, in completion order. In Run's
	// result they are at most MaxSamples (a uniform sample beyond that).
	Latencies []time.Duration
	// Elapsed is the time from the first scheduled request to the last
	// completion (Run's result) or the window's length (TakeWindow).
	Elapsed time.Duration
}

// Responses is the number of requests that got an HTTP response.
func (s Stats) Responses() int {
	n := 0
	for _, c := range s.ByStatus {
		n += c
	}
	return n
}

// Count returns the number of responses with the given status.
func (s Stats) Count(status int) int { return s.ByStatus[status] }

// OK is the number of 2xx responses.
func (s Stats) OK() int {
	n := 0
	for code, c := range s.ByStatus {
		if code >= 200 && code < 300 {
			n += c
		}
	}
	return n
}

// Errors is the number of requests that failed: a status of 500 or more, or a
// transport error.
func (s Stats) Errors() int {
	n := s.TransportErrors
	for code, c := range s.ByStatus {
		if code >= 500 {
			n += c
		}
	}
	return n
}

// RejectionsWellFormed reports whether every 503 carried retry-after and
// x-bulkhead-reason.
func (s Stats) RejectionsWellFormed() bool { return s.MalformedRejections == 0 }

// Quantile returns the q-quantile (0 <= q <= 1) of Latencies by the
// nearest-rank method, or 0 when there are none.
func (s Stats) Quantile(q float64) time.Duration {
	if len(s.Latencies) == 0 {
		return 0
	}
	sorted := slices.Clone(s.Latencies)
	slices.Sort(sorted)
	return quantileSorted(sorted, q)
}

// P50 is Quantile(0.5).
func (s Stats) P50() time.Duration { return s.Quantile(0.5) }

// P99 is Quantile(0.99).
func (s Stats) P99() time.Duration { return s.Quantile(0.99) }

// Max is the largest latency, or 0.
func (s Stats) Max() time.Duration {
	if len(s.Latencies) == 0 {
		return 0
	}
	return slices.Max(s.Latencies)
}

func quantileSorted(sorted []time.Duration, q float64) time.Duration {
	q = min(max(q, 0), 1)
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// MergeStats adds up several Stats (e.g. one route driven by one Load per
// priority). Latencies are concatenated; Elapsed is the longest.
func MergeStats(all ...Stats) Stats {
	out := Stats{ByStatus: map[int]int{}, ByReason: map[string]int{}}
	for _, s := range all {
		out.Sent += s.Sent
		out.NotSent += s.NotSent
		out.Outstanding += s.Outstanding
		out.TransportErrors += s.TransportErrors
		out.Cancelled += s.Cancelled
		out.Rejections += s.Rejections
		out.MalformedRejections += s.MalformedRejections
		out.Elapsed = max(out.Elapsed, s.Elapsed)
		for k, v := range s.ByStatus {
			out.ByStatus[k] += v
		}
		for k, v := range s.ByReason {
			out.ByReason[k] += v
		}
		out.Latencies = append(out.Latencies, s.Latencies...)
	}
	return out
}

// counts is the mutable part of Stats kept by a Load, guarded by its mutex.
type counts struct {
	sent, notSent, transportErrors int
	rejections, malformed          int
	byStatus                       map[int]int
	byReason                       map[string]int
	latencies                      []time.Duration
}

func newCounts() counts {
	return counts{byStatus: map[int]int{}, byReason: map[string]int{}}
}

func (c *counts) recordResponse(resp *http.Response, rejectStatus int) {
	c.byStatus[resp.StatusCode]++
	reason := resp.Header.Get("x-bulkhead-reason")
	if reason != "" {
		c.byReason[reason]++
	}
	if resp.StatusCode == rejectStatus {
		c.rejections++
		if reason == "" || resp.Header.Get("retry-after") == "" {
			c.malformed++
		}
	}
}

func (c *counts) stats(withLatencies bool) Stats {
	s := Stats{
		Sent:                c.sent,
		NotSent:             c.notSent,
		TransportErrors:     c.transportErrors,
		Rejections:          c.rejections,
		MalformedRejections: c.malformed,
		ByStatus:            make(map[int]int, len(c.byStatus)),
		ByReason:            make(map[string]int, len(c.byReason)),
	}
	for k, v := range c.byStatus {
		s.ByStatus[k] = v
	}
	for k, v := range c.byReason {
		s.ByReason[k] = v
	}
	if withLatencies {
		s.Latencies = slices.Clone(c.latencies)
	}
	return s
}
