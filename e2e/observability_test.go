//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/deploy/monitoring"
	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// The dashboard and the alert rules, the files the chart and
// docker-compose ship.
const (
	dashboardFile = "charts/bulkhead/dashboards/bulkhead.json"
	rulesFile     = "charts/bulkhead/rules/bulkhead.rules.yaml"
)

// A real Prometheus scrapes the real daemon and the real Envoy's own stats
// while that Envoy carries load that produces every kind of series
// (startObservedLoad); then every dashboard query and every alert expression
// must return data. A misspelt metric name returns nothing and fails here.
func TestObservabilityQueriesReturnData(t *testing.T) {
	promBin := findPrometheus(t)
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prom := startObservedLoad(t, ctx, promBin, root)

	qs, rules := monitoringQueries(t, root)
	if len(qs) < 20 || len(rules) < 7 {
		t.Fatalf("only %d dashboard queries and %d rules", len(qs), len(rules))
	}
	names := prom.metricNames(ctx)
	check := func(where, expr string) {
		for _, n := range monitoring.MetricNames(expr) {
			if !names[n] {
				t.Errorf("%s: metric %s: Prometheus has no such series", where, n)
			}
		}
		n, err := prom.resultSize(ctx, expr)
		switch {
		case err != nil:
			t.Errorf("%s: %v\n  query: %s", where, err, expr)
		case n == 0:
			t.Errorf("%s: no data\n  query: %s", where, expr)
		}
	}
	empty := emptyOnObservedStack()
	for _, q := range qs {
		where := dashboardFile + ": " + q.Source
		if why, ok := empty[q.Panel]; ok {
			// Allowed to return nothing here; it must still run, and an
			// allowance for a query that has data now is stale.
			if n, err := prom.resultSize(ctx, q.Expr); err != nil || n != 0 {
				t.Errorf("%s: %d series, err %v; allowed empty on this stack (%s): drop the allowance\n  query: %s", where, n, err, why, q.Expr)
			}
			continue
		}
		check(where, q.Expr)
	}
	checkDashboardShapes(ctx, t, prom, qs)
	for _, r := range rules {
		check(rulesFile+": "+r.Name()+" (vector part)", monitoring.DataQuery(r.Expr))
	}
	prom.checkRulesHealthy(ctx, len(rules))
	t.Logf("%d dashboard queries and %d alert expressions returned data", len(qs), len(rules))
}

// emptyOnObservedStack names the dashboard panels that have no data on
// startObservedLoad's stack, and why. TestObservabilityQueriesReturnData and
// TestDashboardRender allow them, and fail if one has data.
func emptyOnObservedStack() map[string]string {
	return map[string]string{
		"Redis call time p99": "the in-memory ledger makes no call to Redis, and the query keeps only the operations called " +
			"(a quantile of no observation would be NaN)",
	}
}

// checkDashboardShapes checks what the dashboard's queries must not return
// on this stack, each a fix that could come undone: each query of these
// panels, wrapped as in the format, must return no series.
func checkDashboardShapes(ctx context.Context, t *testing.T, prom *prometheus, qs []monitoring.Query) {
	t.Helper()
	const nan = "(%[1]s) != (%[1]s)" // only NaN differs from itself
	for _, c := range []struct{ panel, format, what string }{
		// payments has no requests: 0/0. (Its outcome series do not exist,
		// so the Failure ratio check only bites if a bulkhead idles here.)
		{"Rejection ratio", nan, "a NaN ratio (a bulkhead without requests)"},
		{"Failure ratio", nan, "a NaN ratio (a bulkhead without outcomes)"},
		{"Redis call time p99", nan, "a NaN quantile (an operation without calls)"},
		// Only inventory is a dry run; the others' would-reject series are 0.
		{"Dry run: would reject, beside rejected", `(%s) and on (dependency) (bulkhead_enforced{job="bulkhead"} == 1)`,
			"a would-reject series of an enforcing bulkhead (0 throughout)"},
	} {
		found := false
		for _, q := range qs {
			if q.Panel != c.panel || (c.format != nan && q.RefID != "A") {
				continue
			}
			found = true
			expr := fmt.Sprintf(c.format, q.Expr)
			if n, err := prom.resultSize(ctx, expr); err != nil || n != 0 {
				t.Errorf("%s: %s: %d series, err %v\n  query: %s", q.Source, c.what, n, err, expr)
			}
		}
		if !found {
			t.Errorf("no panel %q", c.panel)
		}
	}
}

// startObservedLoad starts a stack, a Prometheus scraping its daemon and its
// Envoy's own stats, and load that produces every kind of series the
// dashboard and the alert rules read (admissions of each class, rejections
// for queue_full, timeout and unknown_bulkhead, a lease expiry, failures). It
// returns once Prometheus has scraped each of them a few times; the load goes
// on until ctx ends or the test's cleanup, which stops it before the stack's.
// The bulkhead inventory is a dry run (enforce: false) on a slow upstream of
// its own, past its limit: it admits all and counts what it would reject.
// (Envoy's error and fail-open counters exist from its start, at 0;
// TestObservabilityEnvoyOutage makes them move. The bulkhead payments, in
// shares mode auto and on no route, exports the bulkhead_shares_* series, at
// 0 without an Envoy holding a share: e2e/shares_test.go moves them.)
func startObservedLoad(t *testing.T, ctx context.Context, promBin, root string) *prometheus {
	t.Helper()
	const skipLog = "x-test-skip-access-log"
	inventory, err := testbed.NewUpstream("inventory", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inventory.Close() })
	inventory.SetDelay(300 * time.Millisecond)
	s := startStack(t, `
authz: {unknown_bulkhead: deny, trusted_priority_sources: ["127.0.0.0/8"]}
leases: {sweep_interval: 100ms, heartbeat_interval: 500ms, heartbeat_ttl: 1s, recovery_window: 700ms}
bulkheads:
  catalog: {max_concurrent: 2, max_queue: 2, max_wait: 100ms, reserve: {critical: 0.5}}
  auth: {max_concurrent: 20, max_queue: 20, max_wait: 200ms}
  orders: {max_concurrent: 20, max_queue: 20, max_wait: 200ms, circuit_breaker: {}}
  payments: {max_concurrent: 10, shares: {mode: auto}}
  inventory: {max_concurrent: 2, max_queue: 2, max_wait: 100ms, enforce: false}
`, func(p *envoy.Params) {
		p.AccessLogExcludeHeader = skipLog // its permits expire after the 1 s heartbeat lease
		p.HeartbeatInterval = 500 * time.Millisecond
		// A route naming a bulkhead the daemon does not know: unknown_bulkhead.
		p.Routes = append(p.Routes, envoy.Route{Name: "nowhere", Prefix: "/nowhere", Bulkhead: "nosuch", Upstream: p.Routes[2].Upstream})
		// The dry run: not one of the stack's upstreams, whose invariant is
		// that none sees more requests at once than its bulkhead's limit.
		p.Routes = append(p.Routes, envoy.Route{Name: "inventory", Prefix: "/inventory", Upstream: endpoint(t, inventory.Addr())})
	})

	prom := startPrometheus(t, ctx, promBin, s.httpAddr, s.envoy.AdminAddr(), filepath.Join(root, rulesFile))

	s.up["catalog"].SetDelay(300 * time.Millisecond)
	s.up["auth"].SetDelay(5 * time.Millisecond)
	s.up["orders"].SetDelay(5 * time.Millisecond)

	// Traffic until ctx ends, stopped before the stack's cleanup (cleanups
	// run last registered first).
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stopLoad(); wg.Wait() })
	wg.Add(2)
	go func() { defer wg.Done(); driveTraffic(loadCtx, s, skipLog) }()
	go func() {
		defer wg.Done()
		// Steady traffic on every route, catalog far past its limit.
		for loadCtx.Err() == nil {
			s.runLoads(loadCtx, 20, 2*time.Second, "/auth", "/orders", "/catalog", "/nowhere", "/inventory")
		}
	}()

	// Wait until Prometheus has scraped every kind of series at least a few
	// times; each of these is a fact about the traffic above.
	for _, q := range []string{
		`count_over_time(up{job="bulkhead"}[1m]) >= 5`,
		`up{job="bulkhead"} == 1`,
		`count_over_time(up{job="envoy"}[1m]) >= 5`,
		`envoy_http_ext_authz_ok > 0`,
		`envoy_http_ext_authz_denied > 0`,
		`bulkhead_admitted_total{dependency="auth",priority="normal"} > 0`,
		`bulkhead_admitted_total{dependency="catalog",priority="critical"} > 0`,
		`bulkhead_admitted_total{dependency="orders",priority="best_effort"} > 0`,
		`bulkhead_rejected_total{dependency="catalog",reason="queue_full"} > 0`,
		`bulkhead_rejected_total{dependency="catalog",reason="timeout"} > 0`,
		`bulkhead_rejected_total{dependency="_unknown",reason="unknown_bulkhead"} > 0`,
		`bulkhead_permits_expired_total{dependency="catalog",criticality="critical"} > 0`,
		`bulkhead_failure_total{dependency="orders"} > 0`,
		`bulkhead_unmatched_checks_total{outcome="denied"} > 0`,
		`bulkhead_enforced{dependency="inventory"} == 0`,
		`bulkhead_would_reject_total{dependency="inventory"} > 0`,
		`rate(bulkhead_admitted_total{dependency="auth",priority="normal"}[30s]) > 0`,
		`count_over_time(bulkhead_shares_switches_total{dependency="payments",to="strict"}[1m]) >= 5`,
		// The recorded load (the dashboard reads it): evaluated, one series
		// per bulkhead_active_calls series, payments' (shares) among them.
		`dependency:bulkhead_running_calls{dependency="payments"} >= 0`,
		`count(dependency:bulkhead_running_calls) == count(bulkhead_active_calls{job="bulkhead"})`,
	} {
		prom.waitFor(ctx, q)
	}
	return prom
}

// driveTraffic adds what steady load does not produce: critical and
// best_effort requests, upstream failures, and permits whose access log
// never comes (reclaimed by their 1 s lease). It returns when ctx ends.
func driveTraffic(ctx context.Context, s *stack, skipLog string) {
	for i := 0; ctx.Err() == nil && i < 1000; i++ {
		switch i % 4 {
		case 0:
			s.get(ctx, "/catalog", map[string]string{"x-bulkhead-priority": "critical"})
		case 1:
			s.get(ctx, "/orders", map[string]string{"x-bulkhead-priority": "best_effort"})
		case 2:
			s.up["orders"].SetStatus(500)
			s.get(ctx, "/orders", nil)
			s.up["orders"].SetStatus(200)
		case 3:
			if i%20 == 3 {
				s.get(ctx, "/catalog", map[string]string{skipLog: "1", "x-bulkhead-priority": "critical"})
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond): // pacing, not synchronisation
		}
	}
}

// repoRoot is the repository root (this file is in e2e/).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Dir(filepath.Dir(file))
}

func readFile(t *testing.T, root, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
