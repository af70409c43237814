package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"
)

// Sentinel errors of Load.
var (
	ErrLoadSpec   = errors.New("invalid load spec")
	ErrLoadReused = errors.New("load already run")
)

// LoadSpec describes a bounded open-loop load: requests are due at a fixed
// Rate whatever the answers, until Duration has passed or MaxRequests were
// due, whichever comes first. A due request is skipped (counted NotSent) when
// MaxOutstanding requests are already out: nothing queues in the driver.
type LoadSpec struct {
	URL            string        // full URL of every request
	Method         string        // default GET
	Header         http.Header   // sent with every request (e.g. x-bulkhead-priority)
	Rate           float64       // requests per second, > 0
	Duration       time.Duration // 0 = bounded by MaxRequests and ctx only
	MaxRequests    int           // > 0
	MaxOutstanding int           // > 0
	Timeout        time.Duration // per-request client timeout; default 10s
	// MaxSamples caps the latencies kept for Run's result (a uniform sample
	// is kept beyond it); default MaxRequests.
	MaxSamples int
	// RejectStatus is the status counted as a bulkhead rejection; default 503.
	RejectStatus int
}

func (s LoadSpec) withDefaults() (LoadSpec, error) {
	var errs []error
	if s.URL == "" {
		errs = append(errs, errors.New("URL is empty"))
	}
	if s.Rate <= 0 {
		errs = append(errs, fmt.Errorf("Rate %v must be > 0", s.Rate))
	}
	if s.MaxRequests <= 0 {
		errs = append(errs, fmt.Errorf("MaxRequests %d must be > 0", s.MaxRequests))
	}
	if s.MaxOutstanding <= 0 {
		errs = append(errs, fmt.Errorf("MaxOutstanding %d must be > 0", s.MaxOutstanding))
	}
	if s.Duration < 0 || s.Timeout < 0 || s.MaxSamples < 0 {
		errs = append(errs, errors.New("Duration, Timeout and MaxSamples must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return s, fmt.Errorf("%w: %w", ErrLoadSpec, err)
	}
	if s.Method == "" {
		s.Method = http.MethodGet
	}
	if s.Timeout == 0 {
		s.Timeout = 10 * time.Second
	}
	if s.MaxSamples == 0 {
		s.MaxSamples = s.MaxRequests
	}
	if s.RejectStatus == 0 {
		s.RejectStatus = http.StatusServiceUnavailable
	}
	return s, nil
}

// Load drives one LoadSpec. Run it once; Snapshot and TakeWindow may be
// called from other goroutines while it runs.
type Load struct {
	spec   LoadSpec
	client *http.Client
	tr     *http.Transport

	stop chan struct{} // closed by Stop

	mu          sync.Mutex
	started     bool
	stopped     bool // Stop was called: admit sends nothing more
	outstanding int
	cancelled   int // requests ended by ctx, counted apart from transport errors
	seen        int // latencies offered to the reservoir
	total       counts
	window      counts
	windowStart time.Time
}

// NewLoad validates spec and returns a Load ready to Run.
func NewLoad(spec LoadSpec) (*Load, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        spec.MaxOutstanding,
		MaxIdleConnsPerHost: spec.MaxOutstanding,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &Load{
		spec: spec,
		tr:   tr,
		client: &http.Client{
			Transport: tr,
			Timeout:   spec.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		stop:        make(chan struct{}),
		total:       newCounts(),
		window:      newCounts(),
		windowStart: time.Now(),
	}, nil
}

// Run sends the load and returns when the schedule is over (or Stop was
// called) and every request has finished, or ctx has ended (outstanding
// requests are then cancelled and counted in Cancelled). It returns
// ErrLoadReused when called twice.
func (l *Load) Run(ctx context.Context) (Stats, error) {
	l.mu.Lock()
	if l.started {
		l.mu.Unlock()
		return Stats{}, ErrLoadReused
	}
	l.started = true
	l.windowStart = time.Now()
	l.mu.Unlock()
	defer l.tr.CloseIdleConnections()

	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
schedule:
	for i := range l.spec.MaxRequests {
		due := time.Duration(float64(i) / l.spec.Rate * float64(time.Second))
		if l.spec.Duration > 0 && due >= l.spec.Duration {
			break
		}
		if wait := time.Until(start.Add(due)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break schedule
			case <-l.stop:
				break schedule
			}
		} else if ctx.Err() != nil {
			break
		}
		send, stopped := l.admit()
		if stopped {
			break
		}
		if !send {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.do(reqCtx)
		}()
	}
	wg.Wait()

	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.total.stats(true)
	s.Cancelled = l.cancelled
	s.Elapsed = time.Since(start)
	return s, nil
}

// admit counts a due request as sent, or as not sent when MaxOutstanding
// requests are already out; after Stop it sends and counts nothing.
func (l *Load) admit() (send, stopped bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return false, true
	}
	if l.outstanding >= l.spec.MaxOutstanding {
		l.total.notSent++
		l.window.notSent++
		return false, false
	}
	l.outstanding++
	l.total.sent++
	l.window.sent++
	return true, false
}

// Stop ends the schedule and returns the number of requests out at that
// moment. No request is sent once Stop has returned; Run returns when the
// requests already out have finished (counted as usual), or when its ctx
// ends, which cancels them (counted in Cancelled). Stop may be called before,
// during or after Run, more than once (a later call returns the requests
// still out), from any goroutine.
func (l *Load) Stop() (outstanding int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.stopped = true
		close(l.stop)
	}
	return l.outstanding
}

func (l *Load) do(ctx context.Context) {
	begin := time.Now()
	resp, err := l.roundTrip(ctx)
	elapsed := time.Since(begin)

	l.mu.Lock()
	defer l.mu.Unlock()
	l.outstanding--
	switch {
	case err != nil && ctx.Err() != nil:
		l.cancelled++
	case err != nil:
		l.total.transportErrors++
		l.window.transportErrors++
	default:
		l.total.recordResponse(resp, l.spec.RejectStatus)
		l.window.recordResponse(resp, l.spec.RejectStatus)
		l.sample(elapsed)
	}
}

func (l *Load) roundTrip(ctx context.Context) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, l.spec.Method, l.spec.URL, nil)
	if err != nil {
		return nil, err
	}
	for k, vs := range l.spec.Header {
		req.Header[k] = vs
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)); err != nil {
		return nil, err
	}
	return resp, nil
}

// sample keeps d in the window and in the run's reservoir; l.mu is held.
func (l *Load) sample(d time.Duration) {
	if len(l.window.latencies) < l.spec.MaxSamples {
		l.window.latencies = append(l.window.latencies, d)
	}
	l.seen++
	if len(l.total.latencies) < l.spec.MaxSamples {
		l.total.latencies = append(l.total.latencies, d)
		return
	}
	if j := rand.IntN(l.seen); j < l.spec.MaxSamples {
		l.total.latencies[j] = d
	}
}

// Snapshot returns the counts so far, without latencies.
func (l *Load) Snapshot() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.total.stats(false)
	s.Outstanding = l.outstanding
	s.Cancelled = l.cancelled
	return s
}

// TakeWindow returns the counts and latencies since the previous TakeWindow
// (or the start of Run) and begins a new window. Requests are attributed to
// the window in which they were sent (Sent, NotSent) or finished (the rest).
func (l *Load) TakeWindow() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	s := l.window.stats(true)
	s.Outstanding = l.outstanding
	s.Elapsed = now.Sub(l.windowStart)
	l.window = newCounts()
	l.windowStart = now
	return s
}
