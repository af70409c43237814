//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
)

// Scenario 6: a permit whose access log never arrives (the request is
// excluded by an access-log filter, periodic entries too) is reclaimed by
// its heartbeat lease, and the metrics say so.
func TestLeaseReclaimsLostRelease(t *testing.T) {
	const skip = "x-test-skip-access-log"
	s := startStack(t, `
leases: {sweep_interval: 100ms, heartbeat_ttl: 2s}
bulkheads:
  catalog: {max_concurrent: 2}
`, func(p *envoy.Params) { p.AccessLogExcludeHeader = skip })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if r := s.get(ctx, "/catalog", map[string]string{skip: "1"}); r.status != 200 {
		t.Fatalf("request: %d %v", r.status, r.err)
	}
	granted := time.Now()
	// A normal request is released by its access log meanwhile...
	if r := s.get(ctx, "/catalog", nil); r.status != 200 {
		t.Fatalf("request: %d %v", r.status, r.err)
	}
	poll(t, ctx, "the logged request's release", func() bool {
		return s.counter("bulkhead_releases_total", map[string]string{"source": "access_log"}) == 1
	})
	// ...while the unlogged one still holds its permit.
	if got := s.gauge("bulkhead_active_calls", "catalog"); got != 1 {
		t.Fatalf("active %v, want 1: the unlogged request's permit", got)
	}
	s.waitGauge("bulkhead_active_calls", "catalog", 0, 4*time.Second)
	if held := time.Since(granted); held < 1500*time.Millisecond {
		t.Errorf("permit reclaimed after %v, before its 2s lease", held)
	}
	m := s.metrics()
	if got := m.Sum("bulkhead_permits_expired_total", map[string]string{"dependency": "catalog"}); got != 1 {
		t.Errorf("bulkhead_permits_expired_total = %v, want 1", got)
	}
	if got := m.Sum("bulkhead_releases_total", map[string]string{"source": "ttl"}); got != 1 {
		t.Errorf("ttl releases = %v, want 1", got)
	}
}
