//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"
)

// Scenario 5b: a client that aborts mid-response (status and part of the
// body received) leaves no permit held; the access log releases it and
// counts the request as aborted by the client.
func TestClientAbortMidResponse(t *testing.T) {
	s := startStack(t, oneSlot, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up := s.up["catalog"]
	up.HoldMidResponse()

	rctx, rcancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, s.base+"/catalog", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	buf := make([]byte, len("partial "))
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatalf("first chunk: %v", err)
	}
	if got := s.gauge("bulkhead_active_calls", "catalog"); got != 1 {
		t.Fatalf("active %v mid-response, want 1", got)
	}
	rcancel() // abort mid-response
	resp.Body.Close()

	s.waitGauge("bulkhead_active_calls", "catalog", 0, time.Second)
	up.ReleaseHeld()
	if err := up.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if up.Aborted() != 1 {
		t.Errorf("upstream saw %d aborted requests, want 1", up.Aborted())
	}
	m := s.metrics()
	if got := m.Sum("bulkhead_releases_total", map[string]string{"source": "access_log"}); got != 1 {
		t.Errorf("access-log releases %v, want 1", got)
	}
	if got := m.Sum("bulkhead_aborted_total", map[string]string{"dependency": "catalog"}); got != 1 {
		t.Errorf("aborted %v, want 1 (success %v, failure %v)", got,
			m.Sum("bulkhead_success_total", nil), m.Sum("bulkhead_failure_total", nil))
	}
	// The slot is free again: the next request is admitted at once.
	if r := s.get(ctx, "/catalog", nil); r.status != 200 {
		t.Fatalf("next request: %d %v", r.status, r.err)
	}
}

// A client that gives up while its request is at the upstream (before any
// response) leaves no permit held either.
func TestClientAbortWhileUpstreamWorks(t *testing.T) {
	s := startStack(t, oneSlot, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up := s.up["catalog"]
	up.Hold()
	rctx, rcancel := context.WithCancel(ctx)
	ch := s.getAsync(rctx, "/catalog", nil)
	if err := up.WaitInflight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	rcancel()
	if r := <-ch; r.err == nil {
		t.Fatalf("aborted request got %d", r.status)
	}
	s.waitGauge("bulkhead_active_calls", "catalog", 0, time.Second)
	up.ReleaseHeld()
	if r := s.get(ctx, "/catalog", nil); r.status != 200 {
		t.Fatalf("next request: %d %v", r.status, r.err)
	}
}
