//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"
)

const demoBulkheads = `
bulkheads:
  catalog: {max_concurrent: 10, max_queue: 20, max_wait: 500ms, reserve: {critical: 0.2, normal: 0.1}}
  auth:    {max_concurrent: 50, max_queue: 50, max_wait: 250ms}
  orders:  {max_concurrent: 30, max_queue: 30, max_wait: 250ms}
`

// A request through Envoy takes a permit and the access log gives it back.
func TestAdmitAndRelease(t *testing.T) {
	s := startStack(t, demoBulkheads, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range routes {
		resp := s.get(ctx, "/"+r, nil)
		if resp.err != nil || resp.status != 200 || resp.header.Get("x-upstream") != r {
			t.Fatalf("%s: %d %v %v", r, resp.status, resp.header, resp.err)
		}
	}
	for _, r := range routes {
		s.waitGauge("bulkhead_active_calls", r, 0, time.Second)
		if got := s.counter("bulkhead_admitted_total", map[string]string{"dependency": r}); got != 1 {
			t.Errorf("%s admitted %v, want 1", r, got)
		}
		if got := s.counter("bulkhead_success_total", map[string]string{"dependency": r}); got != 1 {
			t.Errorf("%s success %v, want 1", r, got)
		}
	}
	if got := s.counter("bulkhead_releases_total", map[string]string{"source": "access_log"}); got != 3 {
		t.Errorf("access-log releases %v, want 3", got)
	}
}
