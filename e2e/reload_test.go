//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Issue 4: editing the config file reloads it; an invalid edit is refused,
// the service keeps serving with the old limits, and the reload-failure
// metric increments.
func TestConfigReload(t *testing.T) {
	const v1 = `
bulkheads:
  catalog: {max_concurrent: 4, max_queue: 2, max_wait: 200ms}
  auth: {max_concurrent: 5}
`
	s := startStack(t, v1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reloads := func(result string) float64 {
		return s.counter("bulkhead_config_reloads_total", map[string]string{"result": result})
	}
	okBefore := reloads("success")

	// A valid edit: catalog grows, orders appears, auth goes away.
	s.setLimit("catalog", 8)
	s.setLimit("orders", 3)
	s.rewriteConfig(strings.NewReplacer("max_concurrent: 4", "max_concurrent: 8",
		"auth: {max_concurrent: 5}", "orders: {max_concurrent: 3}").Replace(v1))
	s.waitGauge("bulkhead_limit", "catalog", 8, 5*time.Second)
	s.waitGauge("bulkhead_limit", "orders", 3, time.Second)
	if got := reloads("success"); got != okBefore+1 {
		t.Errorf("successful reloads %v, want %v", got, okBefore+1)
	}
	if r := s.get(ctx, "/orders", nil); r.status != 200 {
		t.Fatalf("new bulkhead orders: %d %v", r.status, r.err)
	}
	if r := s.get(ctx, "/auth", nil); r.status != 503 || r.header.Get("x-bulkhead-reason") != "unknown_bulkhead" {
		t.Fatalf("removed bulkhead auth: %d %q", r.status, r.header.Get("x-bulkhead-reason"))
	}

	// An invalid edit: refused, counted, and the old limits keep serving.
	failBefore := reloads("failure")
	s.rewriteConfig(`
bulkheads:
  catalog: {max_concurrent: 0, max_queue: 2}
  orders: {max_concurent: 3}
`)
	poll(t, ctx, "the failed reload to be counted", func() bool { return reloads("failure") == failBefore+1 })
	for _, want := range []string{"configuration reload refused", "bulkheads.catalog.max_concurrent", "bulkheads.orders.max_concurent"} {
		if !strings.Contains(s.daemonLog.String(), want) {
			t.Errorf("daemon log does not mention %q", want)
		}
	}
	if got := s.gauge("bulkhead_limit", "catalog"); got != 8 {
		t.Fatalf("catalog limit %v after an invalid edit, want the last good 8", got)
	}
	for _, p := range []string{"/catalog", "/orders"} {
		if r := s.get(ctx, p, nil); r.status != 200 {
			t.Fatalf("%s after an invalid edit: %d %v", p, r.status, r.err)
		}
	}
	// Fixing the file recovers.
	s.rewriteConfig(v1)
	s.waitGauge("bulkhead_limit", "catalog", 4, 5*time.Second)
}
