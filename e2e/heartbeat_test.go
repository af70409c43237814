//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// Heartbeat leases (issue 13), with the shipped defaults: Envoy logs each
// request in flight every second (access_log_flush_interval), each periodic
// entry renews its permit's 3 s lease, and a daemon adopts the permits of
// running requests for its 1.5 s recovery window after a start.
const (
	heartbeatInterval = time.Second
	heartbeatTTL      = 3 * time.Second
)

// (1), (2): an Envoy holding 4 of catalog's 5 permits dies (SIGKILL) and
// comes back at once under the same node id. Its permits are back within
// three intervals, whatever the daemon knew of it: it had sent periodic
// entries, or it died before its first access-log entry, or its Checks
// named no node (Istio's ext_authz provider sends no x-bulkhead-node).
func TestHeartbeatDeadEnvoyPermitsBack(t *testing.T) {
	for _, tt := range []struct {
		name     string
		noNode   bool // no x-bulkhead-node on the Checks
		heardOf  bool // killed after its periodic entries renewed the permits
		wantLogs bool
	}{
		{"restarted under the same node id", false, true, true},
		{"died before its first access-log entry", false, false, false},
		{"without x-bulkhead-node, as under Istio", true, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const limit, held = 5, 4
			fs := startFaultStack(t, faultSpec{
				yaml: `
leases: {sweep_interval: 100ms}
bulkheads:
  catalog: {max_concurrent: 5, max_queue: 8, max_wait: 500ms}
`,
				envoy: func(p *envoy.Params) { p.NoNodeMetadata = tt.noNode },
			})
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			up := fs.up["catalog"]
			up.Hold() // the requests stay at the upstream until their Envoy dies
			defer up.ReleaseHeld()
			sent := time.Now()
			for range held {
				fs.getAsync(ctx, "/catalog", nil)
			}
			if err := up.WaitInflight(ctx, held); err != nil {
				t.Fatal(err)
			}
			fs.waitGauge("bulkhead_active_calls", "catalog", held, 5*time.Second)
			entries := func() float64 { return fs.counter("bulkhead_access_log_entries_total", nil) }
			if tt.heardOf {
				poll(t, ctx, "a periodic entry renewing each permit", func() bool {
					return fs.counter("bulkhead_access_log_entries_total", map[string]string{"result": "renewed"}) >= held
				})
			} else if n := entries(); n != 0 || time.Since(sent) >= heartbeatInterval {
				t.Fatalf("premise: %v access-log entries %v after the requests began: want none, within the first interval",
					n, time.Since(sent).Round(time.Millisecond))
			}

			killed := time.Now()
			fs.killEnvoy()
			fs.restartEnvoy(ctx) // the same bootstrap: the same node.id
			fs.waitGauge("bulkhead_active_calls", "catalog", 0, 3*heartbeatInterval+2*time.Second-time.Since(killed))
			back := time.Since(killed)
			t.Logf("%d permits back %v after SIGKILL (interval %v, ttl %v)", held, back.Round(time.Millisecond), heartbeatInterval, heartbeatTTL)
			if back >= 5*time.Second {
				t.Errorf("permits back after %v, want under 5 s (3 intervals of 1 s, plus the sweep)", back)
			}
			// The last renewal may be an interval and a flush (a quarter
			// interval) old at the kill.
			if back < heartbeatTTL-heartbeatInterval*3/2 {
				t.Errorf("permits back after %v: before their lease (%v) could have passed", back, heartbeatTTL)
			}
			m := fs.metrics()
			if got := m.Sum("bulkhead_permits_expired_total", map[string]string{"dependency": "catalog"}); got != held {
				t.Errorf("expired = %v, want %d", got, held)
			}
			if got := m.Sum("bulkhead_heartbeat_problems_total", nil); got != 0 {
				t.Errorf("heartbeat problems = %v: a dead Envoy is not a misconfigured one", got)
			}
			if got := m.Sum("bulkhead_permits_adopted_total", nil); got != 0 {
				t.Errorf("adopted = %v, want 0", got)
			}
			// The restarted Envoy has the whole bulkhead.
			up.ReleaseHeld()
			var rs []<-chan response
			for range limit {
				rs = append(rs, fs.getAsync(ctx, "/catalog", nil))
			}
			for _, ch := range rs {
				if r := <-ch; r.status != http.StatusOK {
					t.Errorf("request through the restarted Envoy: %d %v %s", r.status, r.err, r.body)
				}
			}
		})
	}
}

// (3): a 30 s request keeps its permit the whole time while the lease is
// 3 s, under a load of short requests that keeps the rest of the bulkhead
// full; the upstream never sees more than the limit (the stack's invariant).
func TestHeartbeatLongRequestKeepsPermit(t *testing.T) {
	parallelE2E(t)
	const long = 30 * time.Second
	s := startStack(t, `
leases: {sweep_interval: 100ms}
bulkheads:
  catalog: {max_concurrent: 2, max_queue: 4, max_wait: 200ms}
`, func(p *envoy.Params) { p.Routes[0].Timeout = 2 * long }) // Envoy's default route timeout is 15 s
	ctx, cancel := context.WithTimeout(context.Background(), long+30*time.Second)
	defer cancel()
	up := s.up["catalog"]
	up.SetDelay(long)
	began := time.Now()
	longReq := s.getAsync(ctx, "/catalog", nil)
	if err := up.WaitInflight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	up.SetDelayRange(20*time.Millisecond, 80*time.Millisecond)
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	_, waitLoad := runLoad(t, lctx, testbed.LoadSpec{URL: s.base + "/catalog", Rate: 20, Duration: long - 2*time.Second,
		MaxRequests: 1000, MaxOutstanding: 4, Timeout: 5 * time.Second})
	// Near its end the long request still holds the oldest permit.
	poll(t, ctx, "the long request near its end", func() bool { return time.Since(began) > long-3*time.Second })
	age := s.gauge("bulkhead_oldest_permit_age_seconds", "catalog")
	if age < (long - 4*time.Second).Seconds() {
		t.Errorf("oldest permit age %vs at %v: the long request's permit was lost", age, time.Since(began).Round(time.Second))
	}
	r := <-longReq
	if r.status != http.StatusOK {
		t.Fatalf("the long request: %d %v", r.status, r.err)
	}
	st := waitLoad()
	m := s.metrics()
	renewed := m.Sum("bulkhead_access_log_entries_total", map[string]string{"result": "renewed"})
	t.Logf("long request %v; %v renewals; load %v", time.Since(began).Round(time.Second), renewed, st.ByStatus)
	if got := m.Sum("bulkhead_permits_expired_total", nil); got != 0 {
		t.Errorf("%v permits expired: a live Envoy's permit was reclaimed", got)
	}
	if renewed < float64(long/heartbeatInterval)*0.8 {
		t.Errorf("%v renewals for a %v request, want about one per interval", renewed, long)
	}
	if st.OK() < 100 {
		t.Errorf("the load got only %d answers of 200: the bulkhead was not serving beside the long request", st.OK())
	}
	if got := m.Sum("bulkhead_heartbeat_problems_total", nil); got != 0 {
		t.Errorf("heartbeat problems = %v, want none", got)
	}
}

// (4): the daemon is SIGKILLed while 3 long requests hold 3 of catalog's 4
// permits, restarted, and flooded at once. The new process adopts the 3
// running requests from their periodic entries during its recovery window,
// so the flood gets the one permit left: the upstream never sees more than
// 4 (the stack's invariant, measured at the upstream).
func TestHeartbeatDaemonRestartAdopts(t *testing.T) {
	const limit, running = 4, 3
	fs := startFaultStack(t, faultSpec{yaml: `
leases: {sweep_interval: 100ms}
bulkheads:
  catalog: {max_concurrent: 4, max_queue: 16, max_wait: 800ms}
`})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	up := fs.up["catalog"]
	up.SetDelay(12 * time.Second)
	var longs []<-chan response
	for range running {
		longs = append(longs, fs.getAsync(ctx, "/catalog", nil))
	}
	if err := up.WaitInflight(ctx, running); err != nil {
		t.Fatal(err)
	}
	up.SetDelayRange(50*time.Millisecond, 150*time.Millisecond)

	fs.killDaemon()
	restarted := time.Now()
	fs.restartDaemon(ctx)
	_, waitFlood := runLoad(t, ctx, testbed.LoadSpec{URL: fs.base + "/catalog", Rate: 100, Duration: 5 * time.Second,
		MaxRequests: 500, MaxOutstanding: 16, Timeout: 5 * time.Second})
	actx, acancel := context.WithTimeout(ctx, 10*time.Second)
	defer acancel()
	defer func() {
		if t.Failed() {
			m := fs.metrics()
			for _, r := range []string{"released", "renewed", "adopted", "duplicate", "late", "unknown", "no_token", "not_end"} {
				t.Logf("access-log entries %s: %v", r, m.Sum("bulkhead_access_log_entries_total", map[string]string{"result": r}))
			}
		}
	}()
	poll(t, actx, "the running requests adopted", func() bool {
		return fs.counter("bulkhead_permits_adopted_total", map[string]string{"dependency": "catalog"}) >= running
	})
	adopted := time.Since(restarted)
	if n := fs.counter("bulkhead_permits_adopted_total", map[string]string{"dependency": "catalog"}); n != running {
		t.Errorf("adopted %v permits, want the %d running requests'", n, running)
	}
	fs.waitAdmitting(ctx)
	st := waitFlood()
	t.Logf("3 running requests adopted %v after the restart; flood: %v; upstream max %d of %d",
		adopted.Round(time.Millisecond), st.ByStatus, up.Max(), limit)
	if adopted > 2*heartbeatInterval {
		t.Errorf("adopted after %v, want within the 1.5 s recovery window plus delivery", adopted)
	}
	if st.OK() == 0 {
		t.Errorf("the flood got no 200 at all: %v", st.ByStatus)
	}
	for _, ch := range longs {
		if r := <-ch; r.status != http.StatusOK {
			t.Errorf("a running request across the restart: %d %v", r.status, r.err)
		}
	}
	// The adopted permits end with their requests' end entries.
	fs.waitGauge("bulkhead_active_calls", "catalog", 0, 5*time.Second)
	m := fs.metrics()
	if got := m.Sum("bulkhead_permits_expired_total", nil); got != 0 {
		t.Errorf("%v permits expired, want every one released by its access log", got)
	}
	if got := m.Sum("bulkhead_releases_total", map[string]string{"source": "access_log"}); got < running {
		t.Errorf("access-log releases %v: the adopted permits were not released by their end entries", got)
	}
}

// (5): an Envoy without the periodic log. Its 5 s request's permit is
// reclaimed under it after 3 s; its end entry then tells, and the daemon
// counts it, logs the node by name once, and gives that node's next
// permits the long lease, so a second 5 s request keeps its permit.
func TestHeartbeatMissingDetected(t *testing.T) {
	s := startStack(t, `
leases: {sweep_interval: 100ms}
bulkheads:
  catalog: {max_concurrent: 2, max_queue: 2, max_wait: 200ms}
`, func(p *envoy.Params) { p.NoHeartbeat = true })
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	up := s.up["catalog"]
	up.SetDelay(5 * time.Second)
	problems := func(p string) float64 {
		return s.counter("bulkhead_heartbeat_problems_total", map[string]string{"problem": p})
	}

	first := s.getAsync(ctx, "/catalog", nil)
	s.waitGauge("bulkhead_active_calls", "catalog", 0, heartbeatTTL+2*time.Second) // reclaimed under the running request
	if r := <-first; r.status != http.StatusOK {
		t.Fatalf("first request: %d %v", r.status, r.err)
	}
	poll(t, ctx, "the late end entry counted", func() bool { return problems("ended_after_expiry") == 1 })
	const warning = "Envoy node sends no periodic access-log entries"
	if n := strings.Count(s.daemonLog.String(), warning); n != 1 || !strings.Contains(s.daemonLog.String(), "node="+envoy.DefaultNodeID) {
		t.Fatalf("%d warnings %q naming node %s, want 1", n, warning, envoy.DefaultNodeID)
	}

	// The node's next permit has the long lease: held for the whole 5 s.
	began := time.Now()
	second := s.getAsync(ctx, "/catalog", nil)
	s.waitGauge("bulkhead_active_calls", "catalog", 1, 2*time.Second)
	poll(t, ctx, "4 s into the second request", func() bool { return time.Since(began) > 4*time.Second })
	if got := s.gauge("bulkhead_active_calls", "catalog"); got != 1 {
		t.Errorf("the second request's permit was reclaimed under it (active %v)", got)
	}
	if r := <-second; r.status != http.StatusOK {
		t.Fatalf("second request: %d %v", r.status, r.err)
	}
	poll(t, ctx, "the long request without renewals counted", func() bool { return problems("no_periodic_entries") == 1 })
	if got := s.counter("bulkhead_permits_expired_total", nil); got != 1 {
		t.Errorf("expired = %v, want 1 (the first request's)", got)
	}
	if n := strings.Count(s.daemonLog.String(), warning); n != 1 {
		t.Errorf("%d warnings, want the node logged once", n)
	}
}
