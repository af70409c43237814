//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
)

const oneSlot = `
bulkheads:
  catalog: {max_concurrent: 1, max_queue: 1, max_wait: 400ms}
`

// Scenario 4: a queued request is admitted when a permit frees; one that
// waits past max_wait gets a 503 from the bulkhead (with its reason), never
// Envoy's ext_authz error status.
func TestWaiting(t *testing.T) {
	s := startStack(t, oneSlot, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up := s.up["catalog"]

	up.Hold()
	first := s.getAsync(ctx, "/catalog", nil)
	if err := up.WaitInflight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	second := s.getAsync(ctx, "/catalog", nil)
	s.waitGauge("bulkhead_queued_calls", "catalog", 1, 5*time.Second)
	up.ReleaseHeld() // first finishes; its access log frees the permit for second
	for i, ch := range []<-chan response{first, second} {
		if r := <-ch; r.err != nil || r.status != 200 {
			t.Fatalf("request %d: %d %v", i, r.status, r.err)
		}
	}

	up.Hold()
	third := s.getAsync(ctx, "/catalog", nil)
	if err := up.WaitInflight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := s.get(ctx, "/catalog", nil)
	waited := time.Since(start)
	if r.status != 503 || r.header.Get("x-bulkhead-reason") != "timeout" || r.header.Get("retry-after") == "" {
		t.Fatalf("waiter past max_wait got %d %v %q", r.status, r.header, r.body)
	}
	if waited < 400*time.Millisecond || waited > 900*time.Millisecond {
		t.Errorf("timed-out request answered after %v, want about max_wait (400ms)", waited)
	}
	up.ReleaseHeld()
	if r := <-third; r.status != 200 {
		t.Fatalf("held request: %d %v", r.status, r.err)
	}
	stats, err := s.envoy.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := stats["http.ingress_http.ext_authz.error"]; n != 0 {
		t.Errorf("Envoy counted %d ext_authz errors; every answer should come from the bulkhead", n)
	}
	if n := stats["http.ingress_http.ext_authz.denied"]; n != 1 {
		t.Errorf("Envoy counted %d ext_authz denials, want 1", n)
	}
	if got := s.counter("bulkhead_rejected_total", map[string]string{"dependency": "catalog", "reason": "timeout"}); got != 1 {
		t.Errorf("timeout rejections %v, want 1", got)
	}
}

// Scenario 5a: a client that disconnects while its Check is queued leaves
// no permit held and no waiter behind.
func TestClientDisconnectWhileQueued(t *testing.T) {
	s := startStack(t, `
bulkheads:
  catalog: {max_concurrent: 1, max_queue: 1, max_wait: 5s}
`, func(p *envoy.Params) { p.ExtAuthzTimeout = 8 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up := s.up["catalog"]
	up.Hold()
	held := s.getAsync(ctx, "/catalog", nil)
	if err := up.WaitInflight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	qctx, qcancel := context.WithCancel(ctx)
	queued := s.getAsync(qctx, "/catalog", nil)
	s.waitGauge("bulkhead_queued_calls", "catalog", 1, 5*time.Second)
	qcancel() // the client goes away; Envoy cancels the Check
	if r := <-queued; r.err == nil {
		t.Fatalf("cancelled request got an answer: %d", r.status)
	}
	s.waitGauge("bulkhead_queued_calls", "catalog", 0, 5*time.Second)
	if got := s.gauge("bulkhead_active_calls", "catalog"); got != 1 {
		t.Fatalf("active %v after the queued client left, want 1 (the held request)", got)
	}
	up.ReleaseHeld()
	if r := <-held; r.status != 200 {
		t.Fatalf("held request: %d %v", r.status, r.err)
	}
	s.waitGauge("bulkhead_active_calls", "catalog", 0, time.Second)
	if got := s.counter("bulkhead_cancelled_total", map[string]string{"dependency": "catalog"}); got != 1 {
		t.Errorf("cancelled %v, want 1", got)
	}
	if up.Served() != 1 {
		t.Errorf("upstream served %d, want 1: the cancelled request must never reach it", up.Served())
	}
}
