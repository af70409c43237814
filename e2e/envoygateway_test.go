//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// TestEnvoyGateway: the recipe for Envoy Gateway users
// (deploy/envoy-gateway/bulkhead.yaml, docs/envoy-gateway.md), translated by
// Envoy Gateway's own translator (egctl x translate, pinned), every object
// accepted, then a real Envoy on the xDS it produced (made static, the
// Services' addresses moved to loopback) in front of a real daemon and an
// upstream that counts its concurrent requests:
//
//   - above the limit, the upstream never sees more than the limit, and the
//     rejections are the daemon's (503 with x-bulkhead-reason);
//   - every permit comes back through the access log, at once (the release
//     logger is unbuffered);
//   - a request longer than the heartbeat lease keeps its permit, renewed by
//     its periodic entries, and no heartbeat problem is counted.
//
// Negative checks: a SecurityPolicy that Envoy Gateway's CRD refuses fails
// the translation, one whose Bulkhead Service is misspelt is reported by
// its status, an EnvoyPatchPolicy aimed at a listener the
// Gateway does not have (accepted, and applied nowhere) by the check of the
// translated access-log settings.
func TestEnvoyGateway(t *testing.T) {
	const gateway, listener = "shop/shop", "shop/shop/http" // the Gateway's namespace/name, and its listener "http"
	egctl := findEgctl(t)
	recipe, err := os.ReadFile(egResources)
	if err != nil {
		t.Fatal(err)
	}

	// Loopback stand-ins for the Services, for the negative checks (the
	// real ones are known once the daemon and the upstream run).
	stand := map[string]envoy.Endpoint{"shop/catalog": {Host: "127.0.0.1", Port: 1}, "bulkhead/bulkhead": {Host: "127.0.0.1", Port: 2}}
	t.Run("broken resources are reported", func(t *testing.T) {
		for _, tt := range []struct{ name, old, new, want string }{
			{"SecurityPolicy to a Service that does not exist",
				"- {name: bulkhead, namespace: bulkhead, port: 9001}\n      backendSettings:  # as the access log's",
				"- {name: bulkhaed, namespace: bulkhead, port: 9001}\n      backendSettings:  # as the access log's",
				"SecurityPolicy shop/bulkhead-catalog: Accepted Invalid: ExtAuth: service bulkhead/bulkhaed not found"},
			{"SecurityPolicy that Envoy Gateway's CRD refuses",
				"- {name: bulkhead, type: Value, value: catalog}",
				"- {name: bulkhead, type: Value}",
				"Exactly one of value or valueRef must be set"},
			{"EnvoyPatchPolicy on a listener the Gateway does not have",
				"    name: shop/shop/http\n    operation:\n      op: add\n      jsonPath: \"$..filters",
				"    name: shop/shop/https\n    operation:\n      op: add\n      jsonPath: \"$..filters",
				"access_log_flush_interval <nil>, want 1s"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				var problems []string
				tr, err := tryTranslate(egctl, yamlWithout(t, recipe, tt.old, tt.new))
				if err != nil {
					problems = append(problems, err.Error())
				} else {
					problems = tr.statusProblems()
					if b, err := staticBootstrap(tr.xds[gateway], stand); err == nil {
						problems = append(problems, accessLogProblems(b, listener, "1s")...)
					} else {
						problems = append(problems, err.Error())
					}
				}
				t.Logf("reported: %q", problems)
				if !strings.Contains(strings.Join(problems, "\n"), tt.want) {
					t.Errorf("problems reported: %q, want %q", problems, tt.want)
				}
			})
		}
	})

	tr := translate(t, egctl, recipe)
	if p := tr.statusProblems(); len(p) > 0 {
		t.Fatalf("Envoy Gateway did not accept the recipe:\n%s", strings.Join(p, "\n"))
	}
	dump, ok := tr.xds[gateway]
	if !ok {
		t.Fatalf("no xDS for Gateway %s in the translation", gateway)
	}

	const limit = 4
	s := &stack{t: t, up: map[string]*testbed.Upstream{}, limits: map[string]int{"catalog": limit}}
	up, err := testbed.NewUpstream("catalog", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	s.up["catalog"] = up
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "bulkhead.yaml")
	if err := os.WriteFile(cfgPath, []byte(listenYAML+`
leases: {sweep_interval: 100ms}
bulkheads:
  catalog: {max_concurrent: 4, max_queue: 4, max_wait: 100ms}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s.startDaemon(ctx, cfgPath, filepath.Join(dir, "addr.json"))

	bootstrap, err := staticBootstrap(dump, map[string]envoy.Endpoint{
		"shop/catalog":      endpoint(t, up.Addr()),
		"bulkhead/bulkhead": endpoint(t, s.grpcAddr),
	})
	if err != nil {
		t.Fatalf("making the translation static: %v", err)
	}
	t.Logf("HTTP filters Envoy Gateway generated: %q", httpFilters(bootstrap))
	if p := accessLogProblems(bootstrap, listener, "1s"); len(p) > 0 {
		t.Fatalf("the EnvoyPatchPolicy did not land:\n%s", strings.Join(p, "\n"))
	}
	cfg, err := json.Marshal(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	s.runEnvoy(ctx, cfg, 2, listener, "envoy on Envoy Gateway's xDS")
	t.Cleanup(s.checkInvariant) // the upstream's peak within the limit; no permit left held

	// Above the limit: 50 ms requests at 200/s want 10 permits, 4 exist.
	up.SetDelay(50 * time.Millisecond)
	load, err := testbed.NewLoad(testbed.LoadSpec{URL: s.base + "/catalog", Rate: 200, Duration: 4 * time.Second,
		MaxRequests: 800, MaxOutstanding: 64})
	if err != nil {
		t.Fatal(err)
	}
	st, err := load.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := s.metrics()
	admitted := m.Sum("bulkhead_admitted_total", map[string]string{"dependency": "catalog"})
	t.Logf("load through Envoy Gateway's config: %d sent, %d ok, %d rejected (503), %d other errors; upstream peak %d concurrent, limit %d; daemon admitted %v",
		st.Sent, st.OK(), st.Count(http.StatusServiceUnavailable), st.Errors()-st.Count(http.StatusServiceUnavailable), up.Max(), limit, admitted)
	if up.Max() != limit {
		t.Errorf("upstream peak %d, want the limit %d reached (and never passed)", up.Max(), limit)
	}
	if st.OK() == 0 || st.Count(http.StatusServiceUnavailable) == 0 || !st.RejectionsWellFormed() {
		t.Errorf("want requests served and the rest rejected by the daemon (x-bulkhead-reason): %+v", st.ByStatus)
	}
	if float64(st.OK()) != admitted {
		t.Errorf("%d requests served, the daemon admitted %v: a request went past ext_authz", st.OK(), admitted)
	}

	// Every permit back through the access log.
	s.waitGauge("bulkhead_active_calls", "catalog", 0, 2*time.Second)
	if got := s.counter("bulkhead_releases_total", map[string]string{"source": "access_log"}); got != admitted {
		t.Errorf("%v permits released by the access log, want all %v admitted", got, admitted)
	}
	// ... at once: an unbuffered logger releases within milliseconds of the
	// response, a buffered one (Envoy's default) up to a second later, at
	// its next flush: one request in three at most would come back within
	// 300 ms by chance, five in a row one time in 400.
	var slowest time.Duration
	for range 5 {
		if r := s.get(ctx, "/catalog", nil); r.status != http.StatusOK {
			t.Fatalf("one request: %d %v", r.status, r.err)
		}
		answered := time.Now()
		s.waitGauge("bulkhead_active_calls", "catalog", 0, 2*time.Second)
		slowest = max(slowest, time.Since(answered))
	}
	t.Logf("5 requests one after the other: each permit back at most %v after its response", slowest.Round(time.Millisecond))
	if slowest > 300*time.Millisecond {
		t.Errorf("a permit came back %v after its response: the release logger is buffered", slowest)
	}

	// A request longer than the 3 s lease keeps its permit: its periodic
	// entries renew it.
	up.SetDelay(0)
	up.Hold()
	defer up.ReleaseHeld()
	renewed := func() float64 {
		return s.counter("bulkhead_access_log_entries_total", map[string]string{"result": "renewed"})
	}
	before := renewed()
	long := s.getAsync(ctx, "/catalog", nil)
	if err := up.WaitInflight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	held := time.Now()
	poll(t, ctx, "four periodic entries renewing the long request's permit", func() bool { return renewed()-before >= 4 })
	if d := time.Since(held); d < heartbeatTTL {
		t.Fatalf("premise: 4 renewals within %v, want the request to outlive the lease (%v)", d, heartbeatTTL)
	}
	if v := s.gauge("bulkhead_active_calls", "catalog"); v != 1 {
		t.Errorf("after %v the long request's permit is not held: active %v", time.Since(held).Round(time.Millisecond), v)
	}
	up.ReleaseHeld()
	if r := <-long; r.status != http.StatusOK {
		t.Errorf("long request: %d %v", r.status, r.err)
	}
	m = s.metrics()
	t.Logf("long request: held %v, %v periodic entries renewed its permit; expired %v, heartbeat problems %v",
		time.Since(held).Round(time.Millisecond), renewed()-before,
		m.Sum("bulkhead_permits_expired_total", nil), m.Sum("bulkhead_heartbeat_problems_total", nil))
	if v := m.Sum("bulkhead_permits_expired_total", nil); v != 0 {
		t.Errorf("%v permits expired: the heartbeats did not keep them", v)
	}
	if v := m.Sum("bulkhead_heartbeat_problems_total", nil); v != 0 {
		t.Errorf("%v heartbeat problems counted", v)
	}
}
