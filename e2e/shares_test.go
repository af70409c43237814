//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// sharesLimit is the limit of the shares tests' bulkhead, and
// sharesDelay each request's time at the upstream: a rate of r requests a
// second over the mesh keeps r x sharesDelay of them in flight.
const (
	sharesLimit = 20
	sharesDelay = 100 * time.Millisecond
)

// sharesYAML is a daemon with bulkhead orders in mode auto: shares far from
// the limit, strict permits near it. Short TTL and timeouts keep the tail of
// a lost share (TTL + max_request_duration, plus margins) at 3.4 s.
const sharesYAML = `
shares: {ttl: 1s, max_request_duration: 2s, interval: 250ms}
bulkheads:
  orders: {max_concurrent: 20, max_queue: 40, max_wait: 500ms%s, shares: {mode: %s}}
`

// sharesMesh is one daemon and several Envoys in front of one upstream,
// each Envoy with the orders route pair (strict, share).
type sharesMesh struct {
	t         *testing.T
	up        *testbed.Upstream
	dir       string
	cfgPath   string
	daemon    *daemonProc
	grpc      string // the daemon's gRPC address (kept across restarts)
	listen    string // its configured listen.grpc
	http      string // its metrics address (new at each start)
	gen       int
	daemonLog testkit.SyncBuffer
	envoys    map[string]*envoyproc.Proc
	bases     map[string]string // node id -> listener URL
	envLog    testkit.SyncBuffer
	opts      sharesOpts
}

// sharesOpts vary the mesh: the mode orders starts in ("" for auto), more
// of its settings (", reserve: {critical: 0.25}"), and a critical route
// (/critical, priority critical, with its own share route) before /orders.
type sharesOpts struct {
	mode     string
	settings string
	critical bool
}

func startSharesMesh(t *testing.T, nodes ...string) *sharesMesh {
	t.Helper()
	return startSharesMeshWith(t, sharesOpts{}, nodes...)
}

func startSharesMeshWith(t *testing.T, opts sharesOpts, nodes ...string) *sharesMesh {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if opts.mode == "" {
		opts.mode = "auto"
	}
	m := &sharesMesh{t: t, dir: t.TempDir(), envoys: map[string]*envoyproc.Proc{}, bases: map[string]string{}, opts: opts}
	m.up = sharesUpstream(t)
	m.cfgPath = filepath.Join(m.dir, "bulkhead.yaml")
	m.startDaemon(ctx, "127.0.0.1:0")
	t.Cleanup(func() {
		for _, e := range m.envoys {
			_ = e.Kill()
		}
		if m.daemon != nil {
			m.daemon.stop(t)
		}
		if t.Failed() {
			t.Logf("bulkhead log:\n%s", tail(m.daemonLog.String(), 8000))
			t.Logf("envoy log:\n%s", tail(m.envLog.String(), 3000))
		}
	})
	for _, n := range nodes {
		m.startEnvoy(ctx, n)
	}
	return m
}

// sharesUpstream is the shares tests' upstream, orders: each request
// held sharesDelay, until the test ends.
func sharesUpstream(t *testing.T) *testbed.Upstream {
	t.Helper()
	up, err := testbed.NewUpstream("orders", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	up.SetDelay(sharesDelay)
	return up
}

func (m *sharesMesh) startDaemon(ctx context.Context, grpc string) {
	m.t.Helper()
	m.listen = grpc
	m.writeConfig(m.opts.mode)
	m.gen++
	d, addrs := startDaemonProc(m.t, ctx, m.cfgPath, filepath.Join(m.dir, fmt.Sprintf("addr-%d.json", m.gen)), &m.daemonLog)
	m.daemon, m.grpc, m.http = d, addrs["grpc"], addrs["http"]
}

// writeConfig writes the daemon's configuration with bulkhead orders in
// mode (the daemon reloads it when it changes).
func (m *sharesMesh) writeConfig(mode string) {
	m.t.Helper()
	cfg := fmt.Sprintf("listen: {grpc: %q, http: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\nlog: {level: debug}\n"+sharesYAML, m.listen, m.opts.settings, mode)
	if err := os.WriteFile(m.cfgPath, []byte(cfg), 0o600); err != nil {
		m.t.Fatal(err)
	}
}

// setMode changes orders' mode through a reload of the configuration
// file, and waits until the daemon has applied it.
func (m *sharesMesh) setMode(ctx context.Context, mode string) {
	m.t.Helper()
	before := m.value("bulkhead_config_reloads_total", map[string]string{"result": "success"})
	m.writeConfig(mode)
	poll(m.t, ctx, "the daemon reloads its configuration (mode "+mode+")", func() bool {
		return m.value("bulkhead_config_reloads_total", map[string]string{"result": "success"}) > before
	})
}

func (m *sharesMesh) startEnvoy(ctx context.Context, node string) {
	m.t.Helper()
	p := envoy.Params{NodeID: node, Bulkhead: endpoint(m.t, m.grpc), SharesMaxRequest: 2 * time.Second,
		Routes: []envoy.Route{{Name: "orders", Prefix: "/orders", Upstream: endpoint(m.t, m.up.Addr()), Shares: true}}}
	if m.opts.critical {
		p.Routes = append([]envoy.Route{{Name: "orders-critical", Prefix: "/critical", Bulkhead: "orders", Priority: "critical",
			Upstream: endpoint(m.t, m.up.Addr()), Shares: true}}, p.Routes...)
	}
	if base, ok := m.bases[node]; ok { // a restart binds the same port
		p.ListenerPort = endpoint(m.t, base[len("http://"):]).Port
	}
	bootstrap, err := envoy.Render(p)
	if err != nil {
		m.t.Fatal(err)
	}
	e, err := envoyproc.Start(ctx, envoyproc.Options{Binary: envoyBin, ConfigYAML: bootstrap, Concurrency: 2, Stderr: &m.envLog})
	if err != nil {
		m.t.Fatalf("envoy %s: %v\n%s", node, err, tail(m.envLog.String(), 4000))
	}
	addr, err := e.ListenerAddr(ctx, envoy.DefaultListenerName)
	if err != nil {
		m.t.Fatal(err)
	}
	m.envoys[node], m.bases[node] = e, "http://"+addr
}

// value reads one series of the daemon's metrics (0 when absent or the
// daemon is down).
func (m *sharesMesh) value(name string, labels map[string]string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ms, err := testbed.Scrape(ctx, "http://"+m.http+"/metrics")
	if err != nil {
		return 0
	}
	return ms.Sum(name, labels)
}

var orders = map[string]string{"dependency": "orders"}

// runtimeInt reads an integer runtime key of node's Envoy (admin /runtime);
// -1 when absent.
func (m *sharesMesh) runtimeInt(node, key string) int {
	return runtimeIntAt(m.envoys[node].AdminAddr(), key)
}

// runtimeIntAt reads an integer runtime key of the Envoy whose admin
// listens on admin; -1 when absent.
func runtimeIntAt(admin, key string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/runtime", nil)
	resp, err := client.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var rt struct {
		Entries map[string]struct {
			FinalValue string `json:"final_value"`
		} `json:"entries"`
	}
	if json.NewDecoder(resp.Body).Decode(&rt) != nil {
		return -1
	}
	e, ok := rt.Entries[key]
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(e.FinalValue)
	if err != nil {
		return -1
	}
	return n
}

// load sends rate requests a second to each of the nodes' Envoys for d.
func (m *sharesMesh) load(ctx context.Context, rate float64, d time.Duration, nodes ...string) testbed.Stats {
	m.t.Helper()
	return m.loadPath(ctx, "/orders", rate, d, nodes...)
}

// loadPath is load on path.
func (m *sharesMesh) loadPath(ctx context.Context, path string, rate float64, d time.Duration, nodes ...string) testbed.Stats {
	m.t.Helper()
	var waits []func() testbed.Stats
	for _, n := range nodes {
		_, wait := runLoad(m.t, ctx, testbed.LoadSpec{URL: m.bases[n] + path, Rate: rate, Duration: d,
			MaxRequests: int(rate*d.Seconds()) + 1, MaxOutstanding: 200, Timeout: 5 * time.Second})
		waits = append(waits, wait)
	}
	var all []testbed.Stats
	for _, w := range waits {
		all = append(all, w())
	}
	return testbed.MergeStats(all...)
}

// checkCap fails the test if the upstream ever saw more than the limit.
func (m *sharesMesh) checkCap(when string) {
	m.t.Helper()
	if got := m.up.Max(); got > sharesLimit {
		m.t.Errorf("INVARIANT (%s): the upstream saw %d concurrent requests on a limit of %d", when, got, sharesLimit)
	}
}

// waitReleased waits until no permit of orders is held (shares included).
func (m *sharesMesh) waitReleased(within time.Duration) time.Duration {
	m.t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	poll(m.t, ctx, "every permit of orders back (shares included)", func() bool {
		return m.value("bulkhead_active_calls", orders) == 0 && m.value("bulkhead_shares_permits", orders) == 0
	})
	return time.Since(start)
}

// TestSharesRampAcrossTheSwitch drives two Envoys from 10% of the limit to
// 150% and back. Far from the limit their circuit breakers admit within
// their shares and the daemon sees no Check; near it the bulkhead switches
// to strict permits, and back. The upstream never sees more than the limit.
func TestSharesRampAcrossTheSwitch(t *testing.T) {
	m := startSharesMesh(t, "envoy-a", "envoy-b")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	checks := func() float64 {
		return m.value("bulkhead_admitted_total", orders) + m.value("bulkhead_rejected_total", orders)
	}
	// Shares handed out: both Envoys hold one.
	poll(t, ctx, "both Envoys hold a share", func() bool { return m.value("bulkhead_shares_envoys", orders) == 2 })

	// 10% of the limit: 2 in flight over the mesh.
	before := checks()
	low := m.load(ctx, 10, 3*time.Second, "envoy-a", "envoy-b")
	lowChecks := checks() - before
	t.Logf("10%%: %d requests, %d OK, %d rejected; %v Checks reached the daemon", low.Responses(), low.OK(), low.Count(503), lowChecks)
	if lowChecks > float64(low.Responses())/10 {
		t.Errorf("far from the limit %v of %d requests took the ext_authz hop: shares should have admitted them", lowChecks, low.Responses())
	}
	if low.Count(503) > 0 {
		t.Errorf("far from the limit %d of %d requests were rejected", low.Count(503), low.Responses())
	}
	m.checkCap("10%")

	// A step at envoy-a from 10% to 60% of the limit (envoy-b stays at
	// 10%): how long until its share covers the step, and the 503s of its
	// circuit breaker meanwhile. In mode shares for the step: at 65% of the
	// limit over the mesh, a slower machine's longer requests would take
	// mode auto past its switch (75%), which is not what is measured here.
	m.setMode(ctx, "shares")
	overflowed := func() float64 {
		return m.value("bulkhead_shares_requests_total", map[string]string{"dependency": "orders", "result": "overflowed"})
	}
	overflowedBefore := overflowed()
	stepDone, otherDone := make(chan testbed.Stats, 1), make(chan testbed.Stats, 1)
	go func() { stepDone <- m.load(ctx, 120, 3*time.Second, "envoy-a") }()
	go func() { otherDone <- m.load(ctx, 10, 3*time.Second, "envoy-b") }()
	stepStart := time.Now()
	var covered time.Duration
	poll(t, ctx, "envoy-a's share covers 60% of the limit", func() bool {
		if m.runtimeInt("envoy-a", "circuit_breakers.orders_shares.default.max_requests") >= sharesLimit*6/10 {
			covered = time.Since(stepStart)
			return true
		}
		return false
	})
	step := <-stepDone
	t.Logf("step 10%% -> 60%% at envoy-a: its share covered it after %v; %d of %d requests rejected (%.2f%%) over the 3 s step",
		covered.Round(time.Millisecond), step.Count(503), step.Responses(), 100*float64(step.Count(503))/float64(max(step.Responses(), 1)))
	// In mode shares every 503 is a circuit breaker's: the daemon counts
	// each one from the Envoys' load reports (bulkhead_shares_requests_total).
	turned := float64(step.Count(503) + (<-otherDone).Count(503))
	poll(t, ctx, "the daemon counts the share overflows the clients saw", func() bool { return overflowed()-overflowedBefore >= turned })
	if got := overflowed() - overflowedBefore; got != turned {
		t.Errorf("bulkhead_shares_requests_total{result=\"overflowed\"} grew by %v over the step, the clients saw %v 503s", got, turned)
	}
	if covered > 2*time.Second {
		t.Errorf("a step to 60%% of the limit at one Envoy took %v to get its share (goal 2 s)", covered)
	}
	m.checkCap("step")

	m.setMode(ctx, "auto")

	// 150%: 30 in flight wanted over a limit of 20.
	before = checks()
	high := m.load(ctx, 150, 4*time.Second, "envoy-a", "envoy-b")
	t.Logf("150%%: %d requests, %d OK, %d rejected; %v Checks; upstream peak %d", high.Responses(), high.OK(), high.Count(503),
		checks()-before, m.up.Max())
	if s := m.value("bulkhead_shares_switches_total", map[string]string{"dependency": "orders", "to": "strict"}); s < 1 {
		t.Errorf("demand at 150%% of the limit: the bulkhead never switched to strict permits")
	}
	if checks()-before < float64(high.Responses())/4 {
		t.Errorf("at 150%% of the limit only %v of %d requests were decided by the daemon", checks()-before, high.Responses())
	}
	m.checkCap("150%")

	// Back to 10%: shares again.
	poll(t, ctx, "back to shares", func() bool {
		m.load(ctx, 10, time.Second, "envoy-a", "envoy-b")
		return m.value("bulkhead_shares_mode", orders) == 1
	})
	before = checks()
	back := m.load(ctx, 10, 2*time.Second, "envoy-a", "envoy-b")
	t.Logf("back to 10%%: %d requests, %v Checks", back.Responses(), checks()-before)
	if checks()-before > float64(back.Responses())/10 {
		t.Errorf("back far from the limit %v of %d requests still took the ext_authz hop", checks()-before, back.Responses())
	}
	m.checkCap("back to 10%")

	// Envoy b dies holding a share (SIGKILL) and a new Envoy process
	// starts under its node id at once: the dead one's share stays in the
	// ledger until it cannot be in use (its layer's TTL, then its requests'
	// timeout), while the new one gets a share of its own.
	held := m.value("bulkhead_shares_permits", orders)
	_ = m.envoys["envoy-b"].Kill()
	m.startEnvoy(ctx, "envoy-b")
	restarted := m.load(ctx, 20, 4*time.Second, "envoy-a", "envoy-b")
	t.Logf("envoy-b SIGKILLed holding part of %v share permits and started again: %d requests over 4 s, %d rejected, upstream peak %d",
		held, restarted.Responses(), restarted.Count(503), m.up.Max())
	if n := strings.Count(m.daemonLog.String(), "share of a replaced Envoy process given back"); n != 1 {
		t.Errorf("the dead envoy-b's share was given back %d times, want once (after its tail)", n)
	}
	m.checkCap("Envoy killed and restarted")

	// Every Envoy gone: their shares come back once their layers' TTL and
	// their requests' timeout have run out (3.4 s here), not before.
	for _, e := range m.envoys {
		_ = e.Kill()
	}
	killed := time.Now()
	el := m.waitReleased(10 * time.Second)
	t.Logf("both Envoys SIGKILLed: every permit back after %v (tail 3.4 s)", time.Since(killed).Round(time.Millisecond))
	if el < 3*time.Second {
		t.Errorf("the shares came back %v after their Envoys died: before their layers' TTL and their requests' timeout had run out", el)
	}
	m.checkCap("end")
}

// TestSharesDaemonKilled kills the daemon (SIGKILL) while two Envoys serve
// under their shares, and starts it again: the Envoys keep their shares
// until their layer's TTL, then run strict (and fail closed while the
// daemon is down); the new daemon adopts what the reconnecting Envoys say
// they hold before it hands out anything. The upstream never sees more
// than the limit.
func TestSharesDaemonKilled(t *testing.T) {
	m := startSharesMesh(t, "envoy-a", "envoy-b")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	poll(t, ctx, "both Envoys hold a share", func() bool { return m.value("bulkhead_shares_envoys", orders) == 2 })

	done := make(chan testbed.Stats, 1)
	go func() { done <- m.load(ctx, 40, 8*time.Second, "envoy-a", "envoy-b") }() // 8 in flight: 40% of the limit
	time.Sleep(2 * time.Second)                                                  // let load run under shares before the crash
	m.daemon.kill(t)
	m.daemon = nil
	down := time.Now()
	time.Sleep(1500 * time.Millisecond) // the daemon stays down past the layers' TTL
	m.startDaemon(ctx, m.grpc)
	t.Logf("daemon down for %v", time.Since(down).Round(time.Millisecond))
	st := <-done
	t.Logf("40%% load across the crash: %d requests, %d OK, %d rejected; upstream peak %d", st.Responses(), st.OK(), st.Count(503), m.up.Max())
	m.checkCap("daemon killed")
	poll(t, ctx, "shares handed out again", func() bool {
		m.load(ctx, 10, 250*time.Millisecond, "envoy-a", "envoy-b")
		return m.value("bulkhead_shares_envoys", orders) == 2
	})
	for _, e := range m.envoys {
		_ = e.Kill()
	}
	m.waitReleased(10 * time.Second)
	m.checkCap("end")
}
