package sizing

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// History is how far back an Observer remembers, one bucket a second.
const History = 10 * time.Minute

const numBuckets = int(History / time.Second)

// Defaults of Params.
const (
	DefaultWindow      = 5 * time.Minute
	DefaultHeadroom    = 0.25
	DefaultMinRequests = 100
)

// ErrTooLittleTraffic is returned by Suggest when the window holds too few
// requests to size from.
var ErrTooLittleTraffic = errors.New("too little traffic to size from")

// ErrInvalidParams wraps every problem with Params.
var ErrInvalidParams = errors.New("invalid sizing parameters")

// Params say how to size.
type Params struct {
	Window      time.Duration // in [1s, History]
	Headroom    float64       // fraction added on top, in [0, 10]
	MinRequests int           // at least 1
}

// Defaults fills the zero fields of p with the defaults.
func (p Params) Defaults() Params {
	if p.Window == 0 {
		p.Window = DefaultWindow
	}
	if p.Headroom == 0 {
		p.Headroom = DefaultHeadroom
	}
	if p.MinRequests == 0 {
		p.MinRequests = DefaultMinRequests
	}
	return p
}

// Validate reports every problem with p at once.
func (p Params) Validate() error {
	var errs []error
	if p.Window < time.Second || p.Window > History {
		errs = append(errs, fmt.Errorf("window: must be in [1s, %s], got %s", History, p.Window))
	}
	if math.IsNaN(p.Headroom) || p.Headroom < 0 || p.Headroom > 10 {
		errs = append(errs, fmt.Errorf("headroom: must be in [0, 10], got %v", p.Headroom))
	}
	if p.MinRequests < 1 {
		errs = append(errs, fmt.Errorf("min_requests: must be at least 1, got %d", p.MinRequests))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidParams, errors.Join(errs...))
}

// Suggestion is a recommendation with its evidence.
type Suggestion struct {
	Window   time.Duration // the span observed
	Requests uint64        // requests ended in it
	// Throughput is the requests ended per second over the seconds that saw
	// any (the load while there was load), MeanThroughput over the window.
	Throughput, MeanThroughput float64
	MeanHold                   time.Duration
	// Little is Throughput × MeanHold: the permits that throughput needs.
	Little float64
	// Peak is the most permits in use at once; P99 the p99 of the permits
	// in use, sampled four times a second.
	Peak, P99 int
	Headroom  float64
	// Current are the settings in force.
	Current bulkhead.Settings
	// MaxConcurrent and MaxQueue are the recommendation.
	MaxConcurrent, MaxQueue int
}

// samplesPerSecond bounds the in-use samples a bucket keeps (Run samples
// every 250 ms).
const samplesPerSecond = 4

type bucket struct {
	sec      int64 // unix second the bucket holds; 0: empty
	requests uint64
	hold     time.Duration
	peak     int
	samples  [samplesPerSecond]int32 // permits in use, sampled
	n        int
}

type history struct {
	mu      sync.Mutex
	buckets [numBuckets]bucket
	// outcomes count the requests ended since the bulkhead was first
	// observed, by bulkhead.Outcome (any other counts as Aborted).
	outcomes [3]uint64
}

func (h *history) at(now time.Time) *bucket {
	sec := now.Unix()
	b := &h.buckets[sec%int64(numBuckets)]
	if b.sec != sec {
		*b = bucket{sec: sec}
	}
	return b
}

// Observer records what each bulkhead's requests did. Create it with New.
type Observer struct {
	clock clock.Clock
	peers Peers // nil: this process sees every request
	// m is read without a lock (every access-log entry looks it up) and
	// replaced, copied, under mu when a bulkhead comes or goes.
	mu sync.Mutex
	m  atomic.Pointer[map[string]*history]
}

// Counts are the requests that ended in one second and their total hold.
type Counts struct {
	Requests uint64
	Hold     time.Duration
}

// Peers are the other replicas that enforce the same limits (the Redis
// ledger): each hears only the access-log streams that reach it, so a
// suggestion adds their requests to this one's, second by second.
type Peers interface {
	// Ended returns the requests of bulkhead name that ended at the other
	// replicas, by unix second, in [from, to].
	Ended(name string, from, to int64) (map[int64]Counts, error)
}

// New returns an empty observer.
func New(c clock.Clock) *Observer {
	o := &Observer{clock: c}
	o.m.Store(&map[string]*history{})
	return o
}

// get returns bulkhead name's history, or nil.
func (o *Observer) get(name string) *history { return (*o.m.Load())[name] }

// SetPeers makes suggestions count the requests that ended at p's replicas
// too. Call it before the observer is used.
func (o *Observer) SetPeers(p Peers) { o.peers = p }

// Names returns the bulkheads observed, in no order.
func (o *Observer) Names() []string {
	return slices.Collect(maps.Keys(*o.m.Load()))
}

// Local returns the requests of bulkhead name that ended here, by unix
// second, in [from, to] (seconds without any are left out).
func (o *Observer) Local(name string, from, to int64) map[int64]Counts {
	h := o.get(name)
	out := map[int64]Counts{}
	if h == nil {
		return out
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range h.buckets {
		if b.sec >= from && b.sec <= to && b.requests > 0 {
			out[b.sec] = Counts{Requests: b.requests, Hold: b.hold}
		}
	}
	return out
}

func (o *Observer) history(name string) *history {
	if h := o.get(name); h != nil {
		return h
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	cur := *o.m.Load()
	if h := cur[name]; h != nil {
		return h
	}
	h := &history{}
	next := maps.Clone(cur)
	next[name] = h
	o.m.Store(&next)
	return h
}

// Ended records a request of bulkhead name that held its permit for held
// (every outcome counts: a permit was held), and counts its outcome.
func (o *Observer) Ended(name string, outcome bulkhead.Outcome, held time.Duration) {
	h := o.history(name)
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.at(o.clock.Now())
	b.requests++
	b.hold += max(held, 0)
	if outcome > bulkhead.Aborted {
		outcome = bulkhead.Aborted
	}
	h.outcomes[outcome]++
}

// Outcomes returns how many of bulkhead name's requests ended in success,
// failure and client abort since it was first observed (the admin API
// shows them). A bulkhead that is gone is forgotten (Run), and counts from
// zero if it comes back, like its limiter's own counters.
func (o *Observer) Outcomes(name string) (success, failure, aborted uint64) {
	h := o.get(name)
	if h == nil {
		return 0, 0, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.outcomes[bulkhead.Success], h.outcomes[bulkhead.Failure], h.outcomes[bulkhead.Aborted]
}

// Sample records that bulkhead name has inUse permits in use now, and had
// peak at most since the previous sample.
func (o *Observer) Sample(name string, inUse, peak int) {
	h := o.history(name)
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.at(o.clock.Now())
	b.peak = max(b.peak, peak, inUse)
	if b.n < samplesPerSecond {
		b.samples[b.n] = int32(min(inUse, math.MaxInt32))
		b.n++
	}
}

// Retain forgets the bulkheads not in names.
func (o *Observer) Retain(names map[string]bool) {
	gone := func(n string, _ *history) bool { return !names[n] }
	o.mu.Lock()
	defer o.mu.Unlock()
	cur := *o.m.Load()
	for n := range cur {
		if !names[n] {
			next := maps.Clone(cur)
			maps.DeleteFunc(next, gone)
			o.m.Store(&next)
			return
		}
	}
}

// Suggest recommends settings for bulkhead name, whose settings now are
// cur, from the last p.Window (p already defaulted and valid).
func (o *Observer) Suggest(name string, cur bulkhead.Settings, p Params) (Suggestion, error) {
	s := Suggestion{Window: p.Window, Headroom: p.Headroom, Current: cur}
	now := o.clock.Now().Unix()
	first := now - int64(p.Window/time.Second) + 1
	var hold time.Duration
	var samples []int
	var busy []bucket // the seconds that saw requests end
	h := o.get(name)
	ended := map[int64]Counts{} // by second, here and at the peers
	if h != nil {
		h.mu.Lock()
		for _, b := range h.buckets {
			if b.sec < first || b.sec > now {
				continue
			}
			if b.requests > 0 {
				ended[b.sec] = Counts{Requests: b.requests, Hold: b.hold}
			}
			s.Peak = max(s.Peak, b.peak)
			for _, v := range b.samples[:b.n] {
				samples = append(samples, int(v))
			}
		}
		h.mu.Unlock()
	}
	if o.peers != nil {
		theirs, err := o.peers.Ended(name, first, now)
		if err != nil {
			return s, fmt.Errorf("the other replicas' requests: %w", err)
		}
		for sec, c := range theirs {
			if sec < first || sec > now {
				continue
			}
			mine := ended[sec]
			ended[sec] = Counts{Requests: mine.Requests + c.Requests, Hold: mine.Hold + c.Hold}
		}
	}
	for sec, c := range ended {
		s.Requests += c.Requests
		hold += c.Hold
		busy = append(busy, bucket{sec: sec, requests: c.Requests})
	}
	if s.Requests < uint64(p.MinRequests) {
		return s, fmt.Errorf("%w: %d requests ended in the last %s, %d needed", ErrTooLittleTraffic, s.Requests, p.Window, p.MinRequests)
	}
	s.MeanThroughput = float64(s.Requests) / p.Window.Seconds()
	s.Throughput = throughput(busy)
	s.MeanHold = hold / time.Duration(s.Requests)
	s.Little = s.Throughput * s.MeanHold.Seconds()
	if len(samples) > 0 {
		slices.Sort(samples)
		s.P99 = samples[max(0, int(math.Ceil(0.99*float64(len(samples))))-1)]
	}
	s.MaxConcurrent = max(1, int(math.Ceil(max(s.Little*(1+p.Headroom), float64(s.P99))-1e-9)))
	s.MaxQueue = cur.MaxQueue
	if cur.MaxWait > 0 && s.MeanHold > 0 {
		s.MaxQueue = int(math.Ceil(cur.MaxWait.Seconds() * float64(s.MaxConcurrent) / s.MeanHold.Seconds()))
	}
	return s, nil
}

// Limiters lists the bulkheads to sample; *bulkhead.Registry is one.
type Limiters interface {
	Keys() []string
	Get(key string) *bulkhead.Limiter
}

// Sampler says how many permits each bulkhead has in use.
type Sampler interface {
	// Keys lists the bulkheads.
	Keys() []string
	// InUse returns bulkhead key's permits in use now and the most in use
	// since the last call; ok is false when it is gone.
	InUse(key string) (inUse, peak int, ok bool)
}

// LimiterSampler samples each limiter of ls (Limiter.TakePeak): the
// permits this process holds, all of them unless the ledger is shared.
func LimiterSampler(ls Limiters) Sampler { return limiterSampler{ls} }

type limiterSampler struct{ ls Limiters }

func (l limiterSampler) Keys() []string { return l.ls.Keys() }

func (l limiterSampler) InUse(key string) (int, int, bool) {
	lim := l.ls.Get(key)
	if lim == nil {
		return 0, 0, false
	}
	peak := lim.TakePeak()
	return lim.Snapshot().InUse, peak, true
}

// SampleEvery is how often the daemon has Run sample each bulkhead's peak
// of permits in use.
const SampleEvery = 250 * time.Millisecond

// Run samples each bulkhead's permits in use every interval, and forgets
// bulkheads that are gone, until ctx ends. It returns nil.
func (o *Observer) Run(ctx context.Context, sm Sampler, every time.Duration) error {
	for {
		t := o.clock.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		keep := map[string]bool{}
		for _, k := range sm.Keys() {
			keep[k] = true
			if inUse, peak, ok := sm.InUse(k); ok {
				o.Sample(k, inUse, peak)
			}
		}
		o.Retain(keep)
	}
}

// throughput is the requests ended per second over the busy seconds. The
// first and last of them are left out when there are more than two: a load
// rarely starts or stops on a second's edge, so they are partial.
func throughput(busy []bucket) float64 {
	slices.SortFunc(busy, func(a, b bucket) int { return int(a.sec - b.sec) })
	if len(busy) > 2 {
		busy = busy[1 : len(busy)-1]
	}
	var n uint64
	for _, b := range busy {
		n += b.requests
	}
	return float64(n) / float64(len(busy))
}
