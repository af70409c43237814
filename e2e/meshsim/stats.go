package meshsim

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Stats counts what a Mesh sent and got. Counters only grow; a runner
// reads them twice and takes the difference. Safe for concurrent use.
type Stats struct {
	Issued, Shed                atomic.Int64 // requests started; not started, at the outstanding bound
	ChecksOK, Denied, Errored   atomic.Int64 // Check answers: OK, a denial, a gRPC error (Envoy: status_on_error)
	EntriesSent, EntriesDropped atomic.Int64
	MessagesSent                atomic.Int64
	StreamsOpened, StreamErrors atomic.Int64
	PeriodicSent, EndSent       atomic.Int64 // entries logged (handed to a logger)
	// Shares (Config.Shares): requests admitted by a share cluster's
	// circuit breaker and those it overflowed (no Check either way), RTDS
	// responses received, LRS reports sent, RTDS or LRS streams that failed.
	SharesAdmitted, SharesOverflow atomic.Int64
	// Of them, at the busy Envoy (Config.Skew).
	BusyAdmitted, BusyOverflow atomic.Int64
	RTDSResponses, LRSReports  atomic.Int64
	SharesStreamErrors         atomic.Int64
	// HealthOK and HealthFailed count the health Checks (Config.HealthCheck)
	// answered SERVING, and those that failed, timed out or answered else.
	HealthOK, HealthFailed atomic.Int64
	checkLatency           samples // OK and denied Checks, from sending to the answer
	// limitedLatency: the same for bulkheads with a limit, whose Checks
	// may wait in the queue (the limiter's wait, not only the daemon's cost).
	limitedLatency samples
	timeline       timeline
	errMu          sync.Mutex
	errCodes       map[string]int64  // Errored by gRPC code
	errSample      map[string]string // the first message of each code
}

func (s *Stats) checkError(code, msg string) {
	s.Errored.Add(1)
	s.errMu.Lock()
	if s.errCodes == nil {
		s.errCodes, s.errSample = map[string]int64{}, map[string]string{}
	}
	s.errCodes[code]++
	if _, ok := s.errSample[code]; !ok {
		s.errSample[code] = msg
	}
	s.errMu.Unlock()
}

// ErrorCodes counts the Checks that failed, by gRPC code.
func (s *Stats) ErrorCodes() map[string]int64 {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return maps.Clone(s.errCodes)
}

// ErrorSamples are the first message of each gRPC code of failed Checks.
func (s *Stats) ErrorSamples() map[string]string {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return maps.Clone(s.errSample)
}

// samples keeps durations up to a bound (then every other one is kept:
// the quantiles stay unbiased for a steady rate).
type samples struct {
	mu   sync.Mutex
	d    []time.Duration
	skip int // keep one in 1<<skip
	n    int
}

const maxSamples = 1 << 20

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.n&(1<<s.skip-1) != 0 {
		return
	}
	if len(s.d) >= maxSamples {
		kept := s.d[:0]
		for i := 0; i < len(s.d); i += 2 {
			kept = append(kept, s.d[i])
		}
		s.d, s.skip = kept, s.skip+1
	}
	s.d = append(s.d, d)
}

// take returns the samples so far, sorted, and starts afresh.
func (s *samples) take() []time.Duration {
	s.mu.Lock()
	d := s.d
	s.d, s.skip, s.n = nil, 0, 0
	s.mu.Unlock()
	slices.Sort(d)
	return d
}

// quantile of sorted samples (0 when none).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// TakeCheckLatencies returns the Check latencies since the last call, sorted.
func (s *Stats) TakeCheckLatencies() []time.Duration { return s.checkLatency.take() }

// TakeLimitedLatencies is TakeCheckLatencies for bulkheads with a limit.
func (s *Stats) TakeLimitedLatencies() []time.Duration { return s.limitedLatency.take() }

// timeline counts Check answers in 100 ms buckets from its start, for an
// hour at most (later answers are not counted).
type timeline struct {
	mu    sync.Mutex
	start time.Time
	ok    []int32
	bad   []int32 // errors and denials other than at a full bulkhead
}

const (
	timelineBucket = 100 * time.Millisecond
	timelineMax    = int(time.Hour / timelineBucket)
)

func (t *timeline) add(now time.Time, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.start.IsZero() {
		t.start = now
	}
	i := int(now.Sub(t.start) / timelineBucket)
	if i < 0 || i >= timelineMax {
		return
	}
	for len(t.ok) <= i {
		t.ok, t.bad = append(t.ok, 0), append(t.bad, 0)
	}
	if ok {
		t.ok[i]++
	} else {
		t.bad[i]++
	}
}

// FirstOKAfter is the first 100 ms bucket at or after from in which a
// Check was admitted, as the time from from to that bucket's end; false if
// none was.
func (s *Stats) FirstOKAfter(from time.Time) (time.Duration, bool) {
	t := &s.timeline
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.start.IsZero() {
		return 0, false
	}
	for i := max(0, int(from.Sub(t.start)/timelineBucket)); i < len(t.ok); i++ {
		if t.ok[i] > 0 {
			return max(0, t.start.Add(time.Duration(i+1)*timelineBucket).Sub(from)), true
		}
	}
	return 0, false
}
