//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Issue 6, hostile input through the real Envoy. A client's own headers
// cannot raise its priority (no trusted sources configured: the default),
// invalid and oversized values are counted and ignored, and headers beyond
// Envoy's own limits (60 KiB of headers, 100 headers by default) are refused
// by Envoy before any Check: the daemon never sees them and keeps serving.
func TestHostileHeadersThroughEnvoy(t *testing.T) {
	s := startStack(t, `
authz: {tenant_header: x-tenant}
bulkheads:
  catalog: {max_concurrent: 4, max_queue: 4, max_wait: 500ms, tenant: {max_concurrent: 2}}
`, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must := func(r response, want int, what string) {
		t.Helper()
		if r.err != nil || r.status != want {
			t.Fatalf("%s: status %d, %v; want %d", what, r.status, r.err, want)
		}
	}
	admitted := func(prio string) float64 {
		return s.counter("bulkhead_admitted_total", map[string]string{"dependency": "catalog", "priority": prio})
	}

	// Spoofed priorities: a raise is ignored and counted; lowering is allowed.
	must(s.get(ctx, "/catalog", prio("critical")), http.StatusOK, "x-bulkhead-priority: critical")
	must(s.get(ctx, "/catalog", prio("best_effort")), http.StatusOK, "x-bulkhead-priority: best_effort")
	if admitted("critical") != 0 || admitted("normal") != 1 || admitted("best_effort") != 1 {
		t.Errorf("admitted critical/normal/best_effort = %v/%v/%v, want 0/1/1", admitted("critical"), admitted("normal"), admitted("best_effort"))
	}
	if got := s.counter("bulkhead_untrusted_priority_total", map[string]string{"dependency": "catalog"}); got != 1 {
		t.Errorf("untrusted priority raises counted %v, want 1", got)
	}

	// Invalid and oversized values that pass Envoy's limits reach the daemon:
	// counted, ignored, admitted at the default class.
	for _, h := range []map[string]string{
		prio("urgent"),
		prio(strings.Repeat("critical", 6000)),    // 48 KiB: under Envoy's 60 KiB
		{"x-tenant": strings.Repeat("t", 40<<10)}, // 40 KiB tenant: no tenant
	} {
		must(s.get(ctx, "/catalog", h), http.StatusOK, "invalid or oversized header")
	}
	if got := s.counter("bulkhead_invalid_priority_total", map[string]string{"dependency": "catalog"}); got != 2 {
		t.Errorf("invalid priorities counted %v, want 2", got)
	}
	if got := s.counter("bulkhead_invalid_inputs_total", map[string]string{"input": "tenant"}); got != 1 {
		t.Errorf("oversized tenants counted %v, want 1", got)
	}
	if got := s.gauge("bulkhead_tenants", "catalog"); got != 0 {
		t.Errorf("%v tenants live after an oversized tenant value", got)
	}

	// Beyond Envoy's limits: Envoy answers, no Check is made.
	checksBefore := s.counter("bulkhead_admitted_total", nil) + s.counter("bulkhead_rejected_total", nil)
	many := map[string]string{}
	for i := range 150 {
		many[fmt.Sprintf("x-h-%d", i)] = "v"
	}
	for _, c := range []struct {
		what   string
		header map[string]string
	}{
		{"a 100 KiB header", prio(strings.Repeat("c", 100<<10))},
		{"headers totalling 80 KiB", map[string]string{"x-a": strings.Repeat("a", 40<<10), "x-b": strings.Repeat("b", 40<<10)}},
		{"150 headers", many},
	} {
		r := s.get(ctx, "/catalog", c.header)
		t.Logf("%s: Envoy answered %d (err %v)", c.what, r.status, r.err)
		if r.err == nil && r.status != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%s: status %d, want 431 from Envoy", c.what, r.status)
		}
		client.CloseIdleConnections() // Envoy closes such connections
	}
	if after := s.counter("bulkhead_admitted_total", nil) + s.counter("bulkhead_rejected_total", nil); after != checksBefore {
		t.Errorf("Checks went from %v to %v: a request beyond Envoy's limits reached the daemon", checksBefore, after)
	}
	// The daemon is unaffected.
	for range 5 {
		must(s.get(ctx, "/catalog", nil), http.StatusOK, "a plain request afterwards")
	}
	s.waitGauge("bulkhead_active_calls", "catalog", 0, 5*time.Second)
}
