package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// loadStats is what one load run measured inside its window.
type loadStats struct {
	// Requests completed inside the window (between the two marks) and the
	// window's real length: their ratio is the throughput.
	Requests int64
	Window   time.Duration
	// Errors: no HTTP response (refused, reset, timed out). NonOK: a
	// response other than 200. Both count requests sent in the window.
	Errors, NonOK int64
	// Censored (open loop): requests still unsent when the run had to stop;
	// each is counted in Latencies with the time it had waited by then, a
	// lower bound of its latency.
	Censored int64
	// Latencies of the requests measured (closed loop: from send; open loop:
	// from the intended send time, so coordinated omission is corrected).
	Latencies []time.Duration
	// SendLag (open loop): how late each request left against its
	// schedule, the load generator's own share of the latency.
	SendLag []time.Duration
}

// marker is called by a load run at the start (end == false) and at the end
// of its measured window, at the moment the request counter is read.
type marker func(end bool)

// errorBackoff paces a worker whose requests fail (Envoy gone, connection
// refused) so that it does not spin.
const errorBackoff = 10 * time.Millisecond

// runClosed is the closed loop: conns workers, each with its own
// connection, send GET / back to back (a new request as soon as the last
// one is answered) for warmup, then for window while measured.
func runClosed(ctx context.Context, addr string, conns int, warmup, window time.Duration, mark marker) loadStats {
	return runClosedPath(ctx, addr, "/", conns, 0, warmup, window, mark)
}

// runClosedPath is runClosed for GET path, with the workers' first
// requests spread over stagger (worker w starts at stagger*w/conns), so
// that long requests do not all end at once, window after window.
func runClosedPath(ctx context.Context, addr, path string, conns int, stagger, warmup, window time.Duration, mark marker) loadStats {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var completed, errs, nonOK atomic.Int64
	var measuring atomic.Bool
	lat := make([][]time.Duration, conns)
	var wg sync.WaitGroup
	for w := range conns {
		wg.Go(func() {
			h := newConn(addr, path)
			defer h.close()
			pause(ctx, stagger*time.Duration(w)/time.Duration(conns))
			for ctx.Err() == nil {
				start := time.Now()
				status, err := h.do(ctx)
				in := measuring.Load()
				switch {
				case err != nil && ctx.Err() != nil:
					return
				case err != nil:
					if in {
						errs.Add(1)
					}
					pause(ctx, errorBackoff)
					continue
				case status != 200 && in:
					nonOK.Add(1)
				}
				completed.Add(1)
				if in {
					lat[w] = append(lat[w], time.Since(start))
				}
			}
		})
	}
	var s loadStats
	pause(ctx, warmup)
	mark(false)
	c0, t0 := completed.Load(), time.Now()
	measuring.Store(true)
	pause(ctx, window)
	measuring.Store(false)
	c1, t1 := completed.Load(), time.Now()
	mark(true)
	cancel()
	wg.Wait()
	s.Requests, s.Window = c1-c0, t1.Sub(t0)
	s.Errors, s.NonOK = errs.Load(), nonOK.Load()
	s.Latencies = merge(lat)
	return s
}

// runOpen is the open loop: requests are due at a fixed rate (request i at
// start + i/rate) for warmup+window, whatever the answers do. Worker k of
// conns sends requests k, k+conns, ... on its own connection; a request
// whose predecessor on the connection is still out leaves late, and its
// latency is counted from when it was due (coordinated omission corrected,
// as wrk2 does). Requests due in the window are measured. Sending stops at
// window end + grace; requests still unsent then are censored.
func runOpen(ctx context.Context, addr string, rate float64, conns int, warmup, window, grace time.Duration, mark marker) loadStats {
	return runOpenPath(ctx, addr, "/", rate, conns, warmup, window, grace, mark)
}

// runOpenPath is runOpen for GET path.
func runOpenPath(ctx context.Context, addr, path string, rate float64, conns int, warmup, window, grace time.Duration, mark marker) loadStats {
	var completed, errs, nonOK, censored atomic.Int64
	begin := time.Now().Add(50 * time.Millisecond) // time for every worker to start
	from, end := begin.Add(warmup), begin.Add(warmup+window)
	hardStop := end.Add(grace)
	due := func(i int) time.Time { return begin.Add(time.Duration(float64(i) / rate * float64(time.Second))) }
	lat := make([][]time.Duration, conns)
	lag := make([][]time.Duration, conns)
	var wg sync.WaitGroup
	for w := range conns {
		wg.Go(func() {
			h := newConn(addr, path)
			defer h.close()
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			for i := w; ; i += conns {
				intended := due(i)
				if !intended.Before(end) || ctx.Err() != nil {
					return
				}
				if d := time.Until(intended); d > 0 {
					timer.Reset(d)
					select {
					case <-timer.C:
					case <-ctx.Done():
						return
					}
				}
				sent := time.Now()
				measured := !intended.Before(from)
				if sent.After(hardStop) {
					// Overloaded: stop sending; what is left is censored.
					for ; due(i).Before(end); i += conns {
						if !due(i).Before(from) {
							censored.Add(1)
							lat[w] = append(lat[w], sent.Sub(due(i)))
						}
					}
					return
				}
				status, err := h.do(ctx)
				done := time.Now()
				switch {
				case err != nil && ctx.Err() != nil:
					return
				case err != nil:
					pause(ctx, errorBackoff)
				default:
					completed.Add(1)
				}
				if !measured {
					continue
				}
				lag[w] = append(lag[w], sent.Sub(intended))
				switch {
				case err != nil:
					errs.Add(1)
				case status != 200:
					nonOK.Add(1)
					lat[w] = append(lat[w], done.Sub(intended))
				default:
					lat[w] = append(lat[w], done.Sub(intended))
				}
			}
		})
	}
	var s loadStats
	pause(ctx, time.Until(from))
	mark(false)
	c0, t0 := completed.Load(), time.Now()
	pause(ctx, time.Until(end))
	c1, t1 := completed.Load(), time.Now()
	mark(true)
	wg.Wait()
	s.Requests, s.Window = c1-c0, t1.Sub(t0)
	s.Errors, s.NonOK, s.Censored = errs.Load(), nonOK.Load(), censored.Load()
	s.Latencies, s.SendLag = merge(lat), merge(lag)
	return s
}

// pause waits for d or until ctx ends. Pacing, not synchronisation.
func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
