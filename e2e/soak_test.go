//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
)

// EnvSoak sets TestSoak's duration (a Go duration); `make soak` sets it
// long. Default defaultSoak, what `make test` runs.
const (
	EnvSoak     = "BULKHEAD_SOAK"
	defaultSoak = 60 * time.Second
)

// Bounds of "back near the starting level" after the soak (see TestSoak).
const (
	goroutineSlack = 20
	heapFactor     = 2.0
	// tombstoneBytes bounds the ledger's memory of ended tokens per
	// request (a 16-byte key in a map, with the map's overhead); it grows
	// with traffic until 64 shards x 4096 keys are remembered, then stays.
	tombstoneBytes = 48
	maxTombstones  = 64 * 4096
)

// soakYAML: leases of 5 s, well above the longest request (1.5 s upstream
// plus a 300 ms wait), so that a permit left by an abort racing its answer
// ends within the soak's idle wait.
const soakYAML = `
authz: {tenant_header: x-tenant, trusted_priority_sources: ["127.0.0.0/8"]}
limits: {max_tenants: 50}
leases: {default_ttl: 5s, sweep_interval: 200ms}
bulkheads:
  catalog: {max_concurrent: 10, max_queue: 20, max_wait: 300ms, reserve: {critical: 0.2, normal: 0.1}}
  auth: {max_concurrent: 20, max_queue: 20, max_wait: 100ms}
  orders: {max_concurrent: 10, max_queue: 10, max_wait: 200ms, tenant: {max_concurrent: 3, max_queue: 2}}
`

// Issue 6, scenario 5: a soak. Mixed traffic through the real Envoy (three
// bulkheads, three priorities, 200 tenant values over a cap of 50, a slow
// dependency that turns slower in spells, upstream timeouts, and clients
// that abort at random while waiting or while the upstream works) for
// $BULKHEAD_SOAK (default 60s) after a warm-up. At the end no permit is
// held (a permit whose client aborted just as its Check was answered ends
// by its 5 s lease: at most one per abort), and the daemon's goroutines and
// heap are back near the level they had after the warm-up.
//
// "Near", and why. Both levels are measured idle, after at least two
// garbage collections that began after the load stopped (polling the
// daemon's /metrics, whose scrapes allocate enough to drive them), taking
// the minimum seen after the first: heap_inuse then holds little garbage.
//   - Goroutines within +20: at idle the daemon runs a fixed set plus about
//     three per gRPC connection. Envoy may keep a few more connections to
//     the daemon after a burst than after the warm-up; a leak of one
//     goroutine per request, per abort or per stream would be thousands.
//   - Heap in use within 2x, plus the ledger's tombstones: what grows with
//     traffic is bounded and mostly full after the warm-up (tenants at
//     max_tenants, metric series of every bulkhead, priority and reason),
//     and 2x absorbs what one GC cycle leaves. The exception is the ledger's
//     memory of ended tokens, which fills with traffic up to 64x4096 keys;
//     the allowance is 48 bytes per request sent, up to that bound. A leak
//     of a permit, a waiter or a tenant per request exceeds it within a
//     minute.
func TestSoak(t *testing.T) {
	parallelE2E(t)
	d := defaultSoak
	if v := os.Getenv(EnvSoak); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive Go duration", EnvSoak, v)
		}
	}
	warm := min(max(d/6, 5*time.Second), 20*time.Second)
	s := startStack(t, soakYAML, func(p *envoy.Params) {
		p.ExtAuthzTimeout = 2 * time.Second
		p.Routes[2].Timeout = 250 * time.Millisecond // orders: upstream timeouts (504)
	})
	s.countServed() // clients abort at random
	s.up["catalog"].SetDelayRange(20*time.Millisecond, 300*time.Millisecond)
	s.up["auth"].SetDelayRange(time.Millisecond, 10*time.Millisecond)
	s.up["orders"].SetDelayRange(20*time.Millisecond, 400*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), d+warm+3*time.Minute)
	defer cancel()

	warmStats := soakTraffic(ctx, s, warm, 1)
	s.waitIdle(t, 15*time.Second)
	base := s.settledProc(t, ctx)
	t.Logf("after %v warm-up (%d requests): %s", warm, warmStats.sent.Load(), base)

	stats := soakTraffic(ctx, s, d, 2)
	s.waitIdle(t, 15*time.Second)
	final := s.settledProc(t, ctx)
	sent := stats.sent.Load()
	t.Logf("after %v soak: %s", d, stats)
	t.Logf("idle after the soak: %s", final)
	m := s.metrics()
	byLease := m.Sum("bulkhead_releases_total", map[string]string{"source": "ttl"})
	t.Logf("permits released by access log %v, by lease %v, by cancel %v; access-log entries duplicate %v, unknown %v",
		m.Sum("bulkhead_releases_total", map[string]string{"source": "access_log"}), byLease,
		m.Sum("bulkhead_releases_total", map[string]string{"source": "cancel"}),
		m.Sum("bulkhead_releases_total", map[string]string{"source": "duplicate"}),
		m.Sum("bulkhead_releases_total", map[string]string{"source": "unknown"}))
	// A client that goes away just as its Check is answered leaves a permit
	// no access log names (Envoy logs the request before the answer lands):
	// its lease ends it. Nothing else may need a lease.
	if aborted := warmStats.aborted.Load() + stats.aborted.Load(); byLease > float64(aborted) {
		t.Errorf("%v permits ended by lease, more than the %d client aborts that can leave one", byLease, aborted)
	}

	if final.goroutines > base.goroutines+goroutineSlack {
		t.Errorf("goroutines %v after the soak, %v after the warm-up: more than +%d", final.goroutines, base.goroutines, goroutineSlack)
	}
	heapLimit := heapFactor*base.heap + float64(min(sent+warmStats.sent.Load(), maxTombstones)*tombstoneBytes)
	if final.heap > heapLimit {
		t.Errorf("heap in use %.1f MiB after the soak, %.1f MiB after the warm-up: over the %.1f MiB allowed",
			final.heap/(1<<20), base.heap/(1<<20), heapLimit/(1<<20))
	}
	if stats.ok.Load() == 0 || stats.aborted.Load() == 0 {
		t.Errorf("the soak did not exercise admissions and aborts: %s", stats)
	}
	for _, name := range routes {
		t.Logf("upstream %s: max concurrency %d served, %d counting aborted requests (limit %d), served %d, aborted %d",
			name, s.up[name].MaxServed(), s.up[name].Max(), s.limits[name], s.up[name].Served(), s.up[name].Aborted())
	}
}

// soakStats counts what the traffic got.
type soakStats struct {
	sent, ok, rejected, other, aborted, errs atomic.Int64
}

func (st *soakStats) String() string {
	return fmt.Sprintf("%d requests: %d OK, %d rejected by the bulkhead, %d other statuses, %d aborted by the client, %d transport errors",
		st.sent.Load(), st.ok.Load(), st.rejected.Load(), st.other.Load(), st.aborted.Load(), st.errs.Load())
}

// soakTraffic drives mixed traffic for d and returns when every request has
// ended: requests in flight at the end complete (only the random aborts
// abort). seed makes runs repeatable.
func soakTraffic(reqCtx context.Context, s *stack, d time.Duration, seed uint64) *soakStats {
	st := &soakStats{}
	ctx, cancel := context.WithTimeout(reqCtx, d)
	defer cancel()
	var wg sync.WaitGroup
	// The slow dependency turns slower for 2 s in every 10.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(8 * time.Second):
				s.up["catalog"].SetDelayRange(500*time.Millisecond, 1500*time.Millisecond)
				select {
				case <-ctx.Done():
				case <-time.After(2 * time.Second):
				}
				s.up["catalog"].SetDelayRange(20*time.Millisecond, 300*time.Millisecond)
			}
		}
	}()
	const workers = 24 // ~150 requests/s in all
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for ctx.Err() == nil {
				soakRequest(reqCtx, s, rng, st)
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(50+rng.IntN(200)) * time.Millisecond): // pacing
				}
			}
		}()
	}
	wg.Wait()
	s.up["catalog"].SetDelayRange(20*time.Millisecond, 300*time.Millisecond)
	return st
}

var soakPriorities = []string{"", "critical", "normal", "best_effort", "urgent"}

// soakRequest sends one random request; one in five is aborted by the
// client after a random 10..500 ms.
func soakRequest(ctx context.Context, s *stack, rng *rand.Rand, st *soakStats) {
	path := "/" + routes[rng.IntN(len(routes))]
	h := map[string]string{}
	if p := soakPriorities[rng.IntN(len(soakPriorities))]; p != "" {
		h["x-bulkhead-priority"] = p
	}
	if rng.IntN(2) == 0 {
		h["x-tenant"] = fmt.Sprintf("tenant-%d", rng.IntN(200))
	}
	rctx := ctx
	abort := rng.IntN(5) == 0
	if abort {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, time.Duration(10+rng.IntN(490))*time.Millisecond)
		defer cancel()
	}
	st.sent.Add(1)
	r := s.get(rctx, path, h)
	switch {
	case r.err != nil && abort && rctx.Err() != nil && ctx.Err() == nil:
		st.aborted.Add(1)
	case r.err != nil:
		st.errs.Add(1)
	case r.status == 200:
		st.ok.Add(1)
	case r.header.Get("x-bulkhead-reason") != "":
		st.rejected.Add(1)
	default:
		st.other.Add(1) // 504 from the orders route timeout, 503 when a wait outlives the client
	}
}

// waitIdle waits until no bulkhead holds a permit or has a waiter.
func (s *stack) waitIdle(t *testing.T, d time.Duration) {
	t.Helper()
	for _, name := range routes {
		s.waitGauge("bulkhead_active_calls", name, 0, d)
		s.waitGauge("bulkhead_queued_calls", name, 0, d)
	}
}

// procLevel is the daemon's idle level.
type procLevel struct {
	goroutines, heap float64
	gcs              int
	took             time.Duration
}

func (p procLevel) String() string {
	return fmt.Sprintf("%v goroutines, %.1f MiB heap in use (after %d GCs, %v)", p.goroutines, p.heap/(1<<20), p.gcs, p.took.Round(time.Millisecond))
}

// settledProc polls the idle daemon until two garbage collections have
// completed since it began, and returns the least goroutines and heap in
// use seen after the first of them. Without two collections within 60 s it
// fails the test.
func (s *stack) settledProc(t *testing.T, ctx context.Context) procLevel {
	t.Helper()
	begin := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	read := func() (g, h, gcs float64) {
		m := s.metrics()
		g, _ = m.Value("go_goroutines", nil)
		h, _ = m.Value("go_memstats_heap_inuse_bytes", nil)
		gcs, _ = m.Value("go_gc_duration_seconds_count", nil)
		return g, h, gcs
	}
	_, _, gc0 := read()
	lvl := procLevel{goroutines: -1}
	for {
		g, h, gcs := read()
		if gcs >= gc0+1 {
			if lvl.goroutines < 0 || g < lvl.goroutines {
				lvl.goroutines = g
			}
			if lvl.heap == 0 || h < lvl.heap {
				lvl.heap = h
			}
		}
		if gcs >= gc0+2 && lvl.goroutines >= 0 {
			lvl.gcs, lvl.took = int(gcs-gc0), time.Since(begin)
			return lvl
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the idle daemon did not collect garbage twice within 60s (GCs %v -> %v)", gc0, gcs)
		case <-time.After(5 * time.Millisecond): // polling, with a deadline
		}
	}
}
