//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

const breakerYAML = `
bulkheads:
  catalog:
    max_concurrent: 20
    circuit_breaker: {failure_ratio: 0.5, min_requests: 10, window: 5s, open_for: 1s, half_open_probes: 3, slow_call_duration: 300ms}
  orders: {max_concurrent: 20}
`

// startSecondEnvoy starts another Envoy, node nodeID, on the stack's daemon
// and upstreams, and returns its listener's base URL.
func (s *stack) startSecondEnvoy(ctx context.Context, nodeID string) string {
	s.t.Helper()
	p := envoy.Params{NodeID: nodeID, Bulkhead: endpoint(s.t, s.grpcAddr),
		Routes: envoy.DemoRoutes(endpoint(s.t, s.up["catalog"].Addr()), endpoint(s.t, s.up["auth"].Addr()), endpoint(s.t, s.up["orders"].Addr()))}
	bootstrap, err := envoy.Render(p)
	if err != nil {
		s.t.Fatal(err)
	}
	var log testkit.SyncBuffer
	e, err := envoyproc.Start(ctx, envoyproc.Options{Binary: envoyBin, ConfigYAML: bootstrap, Concurrency: 1, Stderr: &log})
	if err != nil {
		s.t.Fatalf("second envoy: %v\n%s", err, log.String())
	}
	s.t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		if err := e.Stop(sctx); err != nil {
			s.t.Errorf("second envoy stop: %v", err)
		}
	})
	addr, err := e.ListenerAddr(ctx, envoy.DefaultListenerName)
	if err != nil {
		s.t.Fatal(err)
	}
	return "http://" + addr
}

// TestCircuitBreakerMeshWide: two Envoys share catalog's breaker. Failures
// seen through both open it, though neither saw min_requests alone; while
// open neither sends catalog's upstream anything and orders is untouched;
// once the upstream heals, half-open probes close it; a slow upstream opens
// it through the slow-call rule.
func TestCircuitBreakerMeshWide(t *testing.T) {
	s := startStack(t, breakerYAML, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bases := []string{s.base, s.startSecondEnvoy(ctx, "edge-2")}
	up := s.up["catalog"]
	state := func() float64 { return s.gauge("bulkhead_circuit_state", "catalog") }

	up.SetStatus(500)
	for i := range 10 { // five through each Envoy: neither alone reaches min_requests
		if r := getURL(ctx, bases[i%2]+"/catalog", nil); r.status != 500 {
			t.Fatalf("failing upstream, request %d: %d %v", i, r.status, r.err)
		}
	}
	poll(t, ctx, "catalog's breaker to open", func() bool { return state() == 1 })
	if n := up.Served(); n != 10 {
		t.Errorf("upstream served %d before the breaker opened, want the 10 sent", n)
	}

	for i := range 10 {
		r := getURL(ctx, bases[i%2]+"/catalog", nil)
		if r.status != 503 || r.header.Get("x-bulkhead-reason") != "circuit_open" || r.header.Get("retry-after") != "1" {
			t.Fatalf("open breaker, request %d via Envoy %d: %d %v %q", i, i%2, r.status, r.header, r.body)
		}
		if r := getURL(ctx, bases[i%2]+"/orders", nil); r.status != 200 {
			t.Fatalf("orders while catalog's breaker is open: %d %v", r.status, r.err)
		}
	}
	if n := up.Served(); n != 10 {
		t.Errorf("upstream served %d requests while the breaker was open", n-10)
	}

	up.SetStatus(200) // heals; after open_for the breaker lets 3 probes through
	ok := 0
	poll(t, ctx, "half-open probes to close the breaker", func() bool {
		if r := getURL(ctx, bases[ok%2]+"/catalog", nil); r.status == 200 {
			ok++
		}
		return state() == 0
	})
	if ok < 3 {
		t.Errorf("closed after %d successful probes, want 3", ok)
	}
	for i := range 4 {
		if r := getURL(ctx, bases[i%2]+"/catalog", nil); r.status != 200 {
			t.Fatalf("closed breaker, request %d: %d", i, r.status)
		}
	}

	up.SetDelay(400 * time.Millisecond) // slower than slow_call_duration
	var slow []<-chan response
	for i := range 10 {
		ch := make(chan response, 1)
		go func() { ch <- getURL(ctx, bases[i%2]+"/catalog", nil) }()
		slow = append(slow, ch)
	}
	for i, ch := range slow {
		if r := <-ch; r.status != 200 {
			t.Fatalf("slow request %d: %d %v", i, r.status, r.err)
		}
	}
	poll(t, ctx, "the slow-call rule to open the breaker", func() bool { return state() == 1 })
	if got := s.counter("bulkhead_circuit_transitions_total", map[string]string{"dependency": "catalog", "to": "open"}); got != 2 {
		t.Errorf("opened %v times, want 2", got)
	}
	if got := s.counter("bulkhead_rejected_total", map[string]string{"dependency": "catalog", "reason": "circuit_open"}); got < 10 {
		t.Errorf("circuit_open rejections %v, want at least 10", got)
	}
}

// TestCircuitBreakerSharedLedger: two replicas on the Redis ledger, each
// behind an Envoy of its own, so that each hears only its Envoy's outcomes.
// Eight failures through each, fewer than min_requests (10) at either
// replica: their shared windows open catalog's breaker at both, the
// upstream gets nothing more through either, and once it heals, probes
// close the breaker at both. An operator's force_open at one replica holds
// at the other.
func TestCircuitBreakerSharedLedger(t *testing.T) {
	// open_for 3 s: the checks while it is open (metric scrapes of both
	// replicas, six requests) must end before it turns half-open, counted
	// from the first replica's opening.
	const sharedBreakerYAML = `
bulkheads:
  catalog:
    max_concurrent: 20
    circuit_breaker: {failure_ratio: 0.5, min_requests: 10, window: 5s, open_for: 3s, half_open_probes: 3}
`
	srv := testkit.StartRedis(t)
	rs := startReplicaStack(t, replicaSpec{
		ledger: redisLedger(srv.Addr), yaml: sharedBreakerYAML, replicas: 2, envoys: 1, rdb: newRedisClient(t, srv.Addr),
		envoy: func(p *envoy.Params) { p.BulkheadReplicas = nil }, // Envoy 0 asks replica 0 only
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs.point(1)
	bases := []string{rs.bases[0], rs.startSecondEnvoy(ctx, "edge-2")} // Envoy 1 asks replica 1 only
	up := rs.up["catalog"]
	states := func() [2]float64 {
		var st [2]float64
		for i := range 2 {
			rs.point(i)
			st[i] = rs.gauge("bulkhead_circuit_state", "catalog")
		}
		return st
	}

	// The 16 are all admitted before any fails: one at a time, a replica
	// could count the other's first failures (shared every 250 ms) and open
	// before the last ones were sent.
	up.SetStatus(500)
	up.Hold()
	answers := make([]chan response, 16)
	for i := range answers {
		answers[i] = make(chan response, 1)
		go func() { answers[i] <- getURL(ctx, bases[i%2]+"/catalog", nil) }()
	}
	if err := up.WaitInflight(ctx, len(answers)); err != nil {
		t.Fatal(err)
	}
	up.ReleaseHeld()
	for i, ch := range answers {
		if r := <-ch; r.status != 500 {
			t.Fatalf("failing upstream, request %d: %d %v", i, r.status, r.err)
		}
	}
	opened := time.Now()
	poll(t, ctx, "catalog's breaker to open at both replicas", func() bool { return states() == [2]float64{1, 1} })
	t.Logf("open at both replicas %v after the last failure", time.Since(opened).Round(time.Millisecond))
	for i := range 2 {
		rs.point(i)
		if n := rs.counter("bulkhead_access_log_entries_total", map[string]string{"result": "released"}); n >= 10 {
			t.Fatalf("replica %d released %v permits: it saw min_requests on its own, the test proves nothing", i, n)
		}
	}
	for i := range 6 {
		if r := getURL(ctx, bases[i%2]+"/catalog", nil); r.status != 503 || r.header.Get("x-bulkhead-reason") != "circuit_open" {
			t.Fatalf("open breaker, request %d via Envoy %d: %d %v", i, i%2, r.status, r.header)
		}
	}
	if n := up.Served(); n != 16 {
		t.Errorf("upstream served %d requests while the breaker was open", n-16)
	}

	up.SetStatus(200)
	poll(t, ctx, "probes to close the breaker at both replicas", func() bool {
		for _, b := range bases {
			getURL(ctx, b+"/catalog", nil)
		}
		return states() == [2]float64{0, 0}
	})
	for i := range 4 {
		if r := getURL(ctx, bases[i%2]+"/catalog", nil); r.status != 200 {
			t.Fatalf("closed breaker, request %d: %d", i, r.status)
		}
	}

	// An operator forces it open at replica 0: Envoy 1, asking replica 1,
	// is refused too; back to auto at replica 0, both let requests through.
	rs.point(0)
	if out, err := rs.ctl("circuit", "catalog", "force_open"); err != nil {
		t.Fatalf("bulkheadctl circuit catalog force_open: %v\n%s", err, out)
	}
	poll(t, ctx, "replica 1 refusing under replica 0's force_open", func() bool {
		r := getURL(ctx, bases[1]+"/catalog", nil)
		return r.status == 503 && r.header.Get("x-bulkhead-reason") == "circuit_open"
	})
	if out, err := rs.ctl("circuit", "catalog", "auto"); err != nil {
		t.Fatalf("bulkheadctl circuit catalog auto: %v\n%s", err, out)
	}
	poll(t, ctx, "replica 1 back to auto", func() bool { return getURL(ctx, bases[1]+"/catalog", nil).status == 200 })
}
