//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// runLoads drives one bounded open-loop load per path concurrently.
func (s *stack) runLoads(ctx context.Context, rate float64, d time.Duration, paths ...string) map[string]testbed.Stats {
	s.t.Helper()
	out := make(map[string]testbed.Stats, len(paths))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range paths {
		l, err := testbed.NewLoad(testbed.LoadSpec{
			URL: s.base + p, Rate: rate, Duration: d, MaxRequests: int(rate*d.Seconds()) + 1,
			MaxOutstanding: 400, Timeout: 10 * time.Second,
		})
		if err != nil {
			s.t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := l.Run(ctx)
			if err != nil {
				s.t.Errorf("load %s: %v", p, err)
			}
			mu.Lock()
			out[p] = st
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// Scenario 1 and 2: catalog made slow (2 s) and flooded past its limit at a
// fixed rate; auth and orders keep their latency with zero errors, catalog's
// upstream never sees more than its limit, its rejections are well-formed
// 503s, and after the load every bulkhead's active count is 0 within 1 s.
func TestIsolation(t *testing.T) {
	s := startStack(t, demoBulkheads, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Realistic dependencies of 50 ms each: the 1.5x bound then leaves room
	// for scheduler jitter on a 2-core machine running Envoy, the race-built
	// daemon and the load, while interference from catalog (a Check stuck
	// behind catalog's queue waits up to max_wait, 500 ms) still fails it.
	s.up["auth"].SetDelay(50 * time.Millisecond)
	s.up["orders"].SetDelay(50 * time.Millisecond)
	s.up["catalog"].SetDelay(50 * time.Millisecond)

	// 200 samples per route: p99 is the third-largest latency, so one
	// scheduler hiccup on a 2-core machine is not mistaken for interference.
	const rate, dur = 25.0, 8 * time.Second
	s.runLoads(ctx, rate, time.Second, "/auth", "/orders", "/catalog") // warm connections
	base := s.runLoads(ctx, rate, dur, "/auth", "/orders", "/catalog")
	for p, st := range base {
		if st.Errors() != 0 || st.OK() != st.Sent {
			t.Fatalf("baseline %s: %d sent, %d ok, %d errors", p, st.Sent, st.OK(), st.Errors())
		}
	}

	s.up["catalog"].SetDelay(2 * time.Second)
	var loaded map[string]testbed.Stats
	var catalog testbed.Stats
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		catalog = s.runLoads(ctx, 40, dur, "/catalog")["/catalog"]
	}()
	loaded = s.runLoads(ctx, rate, dur, "/auth", "/orders")
	wg.Wait()

	for _, p := range []string{"/auth", "/orders"} {
		b, l := base[p], loaded[p]
		t.Logf("%s: baseline p50 %v p99 %v; with catalog flooded p50 %v p99 %v (%d requests)",
			p, b.P50(), b.P99(), l.P50(), l.P99(), l.Sent)
		if l.Errors() != 0 || l.OK() != l.Sent || l.NotSent != 0 {
			t.Errorf("%s under catalog flood: %d sent, %d ok, %d errors, %d not sent", p, l.Sent, l.OK(), l.Errors(), l.NotSent)
		}
		if limit := b.P99() * 3 / 2; l.P99() > limit {
			t.Errorf("%s p99 %v exceeds 1.5x baseline p99 %v", p, l.P99(), b.P99())
		}
	}
	t.Logf("catalog: %d sent, %d ok, %d rejected %v, upstream max concurrency %d",
		catalog.Sent, catalog.OK(), catalog.Rejections, catalog.ByReason, s.up["catalog"].Max())
	if catalog.Rejections == 0 || !catalog.RejectionsWellFormed() {
		t.Errorf("catalog: %d rejections, well-formed %v", catalog.Rejections, catalog.RejectionsWellFormed())
	}
	for reason := range catalog.ByReason {
		if reason != "queue_full" && reason != "timeout" && reason != "shed" {
			t.Errorf("catalog rejected with unexpected reason %q", reason)
		}
	}
	if catalog.Count(http.StatusServiceUnavailable)+catalog.OK() != catalog.Sent {
		t.Errorf("catalog: statuses %v do not add up to %d sent", catalog.ByStatus, catalog.Sent)
	}
	// Normal traffic may use the limit less the critical reserve:
	// 10 - ceil(0.2*10) = 8, and saturates exactly there.
	if got := s.up["catalog"].Max(); got != 8 {
		t.Errorf("catalog upstream max concurrency %d, want exactly normal's ceiling 8 (saturated, reserve kept)", got)
	}
	// Scenario 2: no leaks.
	for _, r := range routes {
		s.waitGauge("bulkhead_active_calls", r, 0, time.Second)
		s.waitGauge("bulkhead_queued_calls", r, 0, time.Second)
	}
	if n := s.counter("bulkhead_releases_total", map[string]string{"source": "ttl"}); n != 0 {
		t.Errorf("%v permits were reclaimed by lease: access-log releases were lost", n)
	}
	// Envoy logs only the requests that hold a permit: none of catalog's
	// rejections cost an access-log entry.
	if n := s.counter("bulkhead_access_log_entries_total", map[string]string{"result": "no_token"}); n != 0 {
		t.Errorf("%v access-log entries without a permit (of %d rejections): the shipped logger logs what it need not", n, catalog.Rejections)
	}
}
