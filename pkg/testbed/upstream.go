package testbed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ErrUpstreamClosed is returned by WaitInflight when the upstream is closed
// before the awaited number of requests is in flight.
var ErrUpstreamClosed = errors.New("upstream closed")

// Upstream is an HTTP server on 127.0.0.1 that stands in for a dependency and
// counts its own concurrent requests. Every request is in flight from the
// moment its handler starts until just before the handler returns, which is
// before the response reaches the client (net/http flushes after the handler
// returns), so a proxy cannot start the next request before the count drops.
//
// An Upstream is safe for concurrent use. Close stops it and waits for its
// handlers.
type Upstream struct {
	name string
	addr string
	srv  *http.Server
	done chan struct{}  // closed by Close; ends held and delayed handlers
	wg   sync.WaitGroup // the serve loop

	inflight atomic.Int64
	max      atomic.Int64
	served   atomic.Int64
	aborted  atomic.Int64
	delay    atomic.Pointer[delayRange]
	status   atomic.Int32

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced whenever inflight changes
	gate     chan struct{} // non-nil while held; closed by ReleaseHeld
	midGate  chan struct{} // like gate, but after the headers and part of the body are sent
	byStatus map[int]int64
	// spans are the served requests' times in the handler (since epoch),
	// kept for MaxServed once TrackServed was called; resetAt is the last
	// ResetMax's.
	tracking bool
	epoch    time.Time
	spans    []span
	resetAt  time.Duration
	handlers int // handlers running; Close waits for zero
	closed   bool
	serveErr error
}

// NewUpstream starts an upstream named name listening on addr (host:port);
// an empty addr means 127.0.0.1 with a free port. It answers 200 with the
// header x-upstream: NAME and a body of a few bytes until told otherwise.
func NewUpstream(name, addr string) (*Upstream, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", name, err)
	}
	u := &Upstream{
		name:     name,
		addr:     ln.Addr().String(),
		done:     make(chan struct{}),
		changed:  make(chan struct{}),
		byStatus: make(map[int]int64),
		epoch:    time.Now(),
	}
	u.status.Store(http.StatusOK)
	u.srv = &http.Server{
		Handler:           http.HandlerFunc(u.serve),
		ReadHeaderTimeout: 10 * time.Second,
	}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		err := u.srv.Serve(ln)
		if !errors.Is(err, http.ErrServerClosed) {
			u.mu.Lock()
			u.serveErr = err
			u.mu.Unlock()
		}
	}()
	return u, nil
}

// Name is the upstream's name, echoed in the x-upstream header.
func (u *Upstream) Name() string { return u.name }

// Addr is the bound host:port.
func (u *Upstream) Addr() string { return u.addr }

// URL is "http://" + Addr().
func (u *Upstream) URL() string { return "http://" + u.addr }

// delayRange is a uniform response delay in [lo, hi].
type delayRange struct{ lo, hi time.Duration }

func (r *delayRange) pick() time.Duration {
	if r == nil || r.hi <= 0 {
		return 0
	}
	if r.hi <= r.lo {
		return r.lo
	}
	return r.lo + rand.N(r.hi-r.lo+1)
}

// SetDelay makes subsequent requests wait d before answering. The wait ends
// early when the request's context ends (the client went away) or the
// upstream is closed.
func (u *Upstream) SetDelay(d time.Duration) { u.SetDelayRange(d, d) }

// SetDelayRange is SetDelay with a delay drawn uniformly from [lo, hi] for
// each request (hi < lo means lo), so that slow responses do not all finish
// in step.
func (u *Upstream) SetDelayRange(lo, hi time.Duration) {
	u.delay.Store(&delayRange{lo: max(lo, 0), hi: max(hi, lo, 0)})
}

// SetStatus sets the HTTP status of subsequent responses (e.g. 500).
func (u *Upstream) SetStatus(code int) { u.status.Store(int32(code)) }

// Hold closes the gate: requests that arrive from now on block, counted as
// in flight, until ReleaseHeld, the end of their context, or Close. Holding
// twice is the same as holding once.
func (u *Upstream) Hold() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.gate == nil {
		u.gate = make(chan struct{})
	}
}

// HoldMidResponse is Hold, but the gate is in the middle of the response:
// requests that arrive from now on send their status, headers and part of
// the body, then block (still in flight) until ReleaseHeld, the end of their
// context, or Close. Clients can then abort mid-response.
func (u *Upstream) HoldMidResponse() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.midGate == nil {
		u.midGate = make(chan struct{})
	}
}

// ReleaseHeld opens the gates and lets every held request continue.
func (u *Upstream) ReleaseHeld() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.gate != nil {
		close(u.gate)
		u.gate = nil
	}
	if u.midGate != nil {
		close(u.midGate)
		u.midGate = nil
	}
}

// Inflight is the number of requests in the handler right now.
func (u *Upstream) Inflight() int { return int(u.inflight.Load()) }

// Max is the highest Inflight observed since start or the last ResetMax.
// No peak is missed: it is raised on every increment.
func (u *Upstream) Max() int { return int(u.max.Load()) }

// ResetMax sets Max to the current Inflight, and starts MaxServed anew.
func (u *Upstream) ResetMax() {
	u.mu.Lock()
	u.resetAt = time.Since(u.epoch)
	u.mu.Unlock()
	u.max.Store(u.inflight.Load())
	u.raiseMax(u.inflight.Load()) // an increment between the two loads still counts
}

// TrackServed makes the upstream keep each served request's span in the
// handler, for MaxServed (memory grows with the requests served, so only
// the tests that ask for it keep them).
func (u *Upstream) TrackServed() {
	u.mu.Lock()
	u.tracking = true
	u.mu.Unlock()
}

// span is a served request's time in the handler, since the epoch.
type span struct {
	start, end time.Duration
	tag        string
}

// HeaderDelay is the request header that sets that request's delay, a Go
// duration of at most a minute, in place of SetDelay's.
const HeaderDelay = "x-upstream-delay"

const maxHeaderDelay = time.Minute

// HeaderTag is the request header whose value a served request's Span
// keeps (at most maxTag bytes), so that a test can count by it: a tenant,
// a class.
const HeaderTag = "x-upstream-tag"

const maxTag = 64

// Span is a served request's time in the handler, as offsets on the
// upstream's own clock (Elapsed), and its HeaderTag.
type Span struct {
	Start, End time.Duration
	Tag        string
}

// Elapsed is the time since the upstream started: the clock of its Spans.
func (u *Upstream) Elapsed() time.Duration { return time.Since(u.epoch) }

// ServedSpans returns the spans MaxServed counts, in the order the
// requests ended. It panics unless TrackServed was called.
func (u *Upstream) ServedSpans() []Span {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.tracking {
		panic("testbed: ServedSpans without TrackServed")
	}
	out := make([]Span, len(u.spans))
	for i, s := range u.spans {
		out[i] = Span{s.start, s.end, s.tag}
	}
	return out
}

// MaxServed is the highest number of requests the upstream served
// concurrently since start or the last ResetMax: Max, counting only the
// requests it answered. A request whose client went away (Aborted) is left
// out: the proxy reset it and released its permit, but its handler counts
// it in flight until it notices the reset, which under heavy CPU load can
// be after the proxy has sent the next request. Each served request is in
// flight from just before its handler counted it to when its response was
// written, which is before the response was flushed to the proxy.
//
// It panics unless TrackServed was called.
func (u *Upstream) MaxServed() int {
	type event struct {
		at    time.Duration
		delta int // +1 a start, -1 an end
	}
	u.mu.Lock()
	if !u.tracking {
		u.mu.Unlock()
		panic("testbed: MaxServed without TrackServed")
	}
	from := u.resetAt
	events := make([]event, 0, 2*len(u.spans))
	for _, s := range u.spans {
		if s.end > from {
			events = append(events, event{max(s.start, from), 1}, event{s.end, -1})
		}
	}
	u.mu.Unlock()
	// By time; at equal times an end before a start, so that touching spans
	// do not count as overlapping.
	slices.SortFunc(events, func(a, b event) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.delta, b.delta)
	})
	n, peak := 0, 0
	for _, e := range events {
		n += e.delta
		peak = max(peak, n)
	}
	return peak
}

// Served is the number of responses written (requests whose client went
// away before the answer are counted by Aborted instead).
func (u *Upstream) Served() int { return int(u.served.Load()) }

// Aborted is the number of requests whose context ended while they were
// held or delayed.
func (u *Upstream) Aborted() int { return int(u.aborted.Load()) }

// StatusCounts returns a copy of the responses written, by status.
func (u *Upstream) StatusCounts() map[int]int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[int]int64, len(u.byStatus))
	for k, v := range u.byStatus {
		out[k] = v
	}
	return out
}

// WaitInflight blocks until at least n requests are in flight, ctx ends, or
// the upstream is closed. It is notified by every change; it never polls.
func (u *Upstream) WaitInflight(ctx context.Context, n int) error {
	return waitUntil(ctx, func() (<-chan struct{}, bool, bool) {
		u.mu.Lock()
		ch, closed := u.changed, u.closed
		u.mu.Unlock()
		// Read after taking ch: an increment after this load closes ch.
		return ch, u.Inflight() >= n, closed
	}, func() string {
		return fmt.Sprintf("upstream %s: waiting for %d in flight (have %d)", u.name, n, u.Inflight())
	})
}

// WaitIdle blocks until no request is in flight or ctx ends. Like
// WaitInflight it is notified by every change; it never polls.
func (u *Upstream) WaitIdle(ctx context.Context) error {
	return waitUntil(ctx, func() (<-chan struct{}, bool, bool) {
		u.mu.Lock()
		ch := u.changed
		u.mu.Unlock()
		return ch, u.Inflight() == 0, false
	}, func() string {
		return fmt.Sprintf("upstream %s: waiting for idle (have %d in flight)", u.name, u.Inflight())
	})
}

// Close stops the server, releases held requests, and waits for every
// handler and the serve loop to return. It returns the serve loop's error,
// if any. Close is idempotent.
func (u *Upstream) Close() error {
	u.mu.Lock()
	if !u.closed {
		u.closed = true
		close(u.done)
		u.notifyLocked()
	}
	u.mu.Unlock()
	err := u.srv.Close()
	u.wg.Wait()
	u.mu.Lock()
	defer u.mu.Unlock()
	for u.handlers > 0 { // bounded: no handler starts after closed is set
		ch := u.changed
		u.mu.Unlock()
		<-ch
		u.mu.Lock()
	}
	return errors.Join(err, u.serveErr)
}

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	u.handlers++
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.handlers--
		u.notifyLocked()
		u.mu.Unlock()
	}()
	// The delay is drawn before the request counts as in flight, so that a
	// request WaitInflight has seen keeps the delay set before it arrived.
	delay := u.delay.Load().pick()
	if v := r.Header.Get(HeaderDelay); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 && d <= maxHeaderDelay {
			delay = d
		}
	}
	// The span starts before the request counts in flight: a request seen
	// in flight (WaitInflight) has its start, whatever runs next.
	start := time.Since(u.epoch)
	u.enter()
	defer u.leave()

	ctx := r.Context()
	u.mu.Lock()
	gate := u.gate
	u.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			u.aborted.Add(1)
			return
		case <-u.done:
			u.aborted.Add(1)
			return
		}
	}
	if d := delay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			u.aborted.Add(1)
			return
		case <-u.done:
			t.Stop()
			u.aborted.Add(1)
			return
		}
	}
	code := int(u.status.Load())
	body := u.name + " " + strconv.Itoa(code) + "\n"
	w.Header().Set("x-upstream", u.name)
	w.Header().Set("content-type", "text/plain")
	u.mu.Lock()
	mid := u.midGate
	u.mu.Unlock()
	if mid != nil {
		// Stream: headers and a first chunk now, the rest after the gate.
		w.WriteHeader(code)
		_, _ = w.Write([]byte("partial "))
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		select {
		case <-mid:
		case <-ctx.Done():
			u.aborted.Add(1)
			return
		case <-u.done:
			u.aborted.Add(1)
			return
		}
		_, _ = w.Write([]byte(body))
	} else {
		w.Header().Set("content-length", strconv.Itoa(len(body)))
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
	end := time.Since(u.epoch)
	u.served.Add(1)
	u.mu.Lock()
	u.byStatus[code]++
	if u.tracking {
		tag := r.Header.Get(HeaderTag)
		u.spans = append(u.spans, span{start, end, tag[:min(len(tag), maxTag)]})
	}
	u.mu.Unlock()
}

func (u *Upstream) enter() {
	n := u.inflight.Add(1)
	u.raiseMax(n)
	u.notify()
}

func (u *Upstream) leave() {
	u.inflight.Add(-1)
	u.notify()
}

// raiseMax sets max to n unless it is already at least n.
func (u *Upstream) raiseMax(n int64) {
	for {
		cur := u.max.Load()
		if n <= cur || u.max.CompareAndSwap(cur, n) {
			return
		}
	}
}

func (u *Upstream) notify() {
	u.mu.Lock()
	u.notifyLocked()
	u.mu.Unlock()
}

func (u *Upstream) notifyLocked() {
	close(u.changed)
	u.changed = make(chan struct{})
}
