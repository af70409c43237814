//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// Connection bulkheads (issue 16): Envoy's network ext_authz filter asks for
// a permit before a TCP connection proceeds, and the TCP proxy's access log
// gives it back when the connection closes. The dependency is a TCPEcho
// that counts its own open connections.

// connStack is a stack whose Envoy also proxies TCP listeners, each to its
// own echo upstream.
type connStack struct {
	*stack
	echo  map[string]*testbed.TCPEcho // by listener (and bulkhead) name
	port  map[string]int              // Envoy's TCP listener port, by name
	limit map[string]int
}

// startConnStack starts a stack whose Envoy has one TCP listener per name
// in listeners, on a free port; yaml is the daemon's configuration, with
// %d verbs filled by those ports in order.
func startConnStack(t *testing.T, yaml string, listeners []string, mod func(*envoy.Params)) *connStack {
	t.Helper()
	cs := &connStack{echo: map[string]*testbed.TCPEcho{}, port: map[string]int{}, limit: map[string]int{}}
	var ports []any
	var tcp []envoy.TCPListener
	for _, name := range listeners {
		e := newEcho(t)
		cs.echo[name], cs.port[name] = e, endpoint(t, freePort(t)).Port
		ports = append(ports, cs.port[name])
		tcp = append(tcp, envoy.TCPListener{Name: name, Port: cs.port[name], Upstream: endpoint(t, e.Addr())})
	}
	cs.stack = startStack(t, fmt.Sprintf(yaml, ports...), func(p *envoy.Params) {
		p.TCPListeners = tcp
		if mod != nil {
			mod(p)
		}
	})
	for _, name := range listeners {
		cs.limit[name] = cs.limits[name]
	}
	// The connection invariant, checked before the stack's own (cleanups
	// run last first).
	t.Cleanup(func() {
		for name, e := range cs.echo {
			if e.Max() > cs.limit[name] {
				t.Errorf("INVARIANT: upstream %s saw %d open connections, bulkhead limit %d", name, e.Max(), cs.limit[name])
			}
		}
	})
	return cs
}

// newEcho starts a TCP echo upstream, closed when the test ends.
func newEcho(t testing.TB) *testbed.TCPEcho {
	t.Helper()
	e, err := testbed.NewTCPEcho()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// tcpClient is one client connection through Envoy. It sends a line at
// once; the echo comes back only once the connection is admitted (Envoy
// holds its data until the Check answers), and Envoy closes a rejected one.
type tcpClient struct {
	c net.Conn
	// echoed receives nil at the echo, or the error that ended the wait
	// (io.EOF: Envoy closed the connection).
	echoed chan error
}

func dialThrough(t *testing.T, port int) *tcpClient {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cl := &tcpClient{c: c, echoed: make(chan error, 1)}
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	go func() { // ends when the connection is closed, by Envoy or the test
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil && line != "ping\n" {
			err = fmt.Errorf("echo %q", line)
		}
		cl.echoed <- err
	}()
	return cl
}

// wait waits up to d for the echo (nil) or the connection's end (its error).
func (c *tcpClient) wait(d time.Duration) (done bool, err error) {
	select { // first without waiting: with d 0 a ready timer would race the echo
	case err := <-c.echoed:
		return true, err
	default:
	}
	select {
	case err := <-c.echoed:
		return true, err
	case <-time.After(d): // a deadline, not a synchronisation
		return false, nil
	}
}

// waitAdmitted waits for the first n of cls (in any order) to be echoed;
// it returns those admitted and the rest.
func waitAdmitted(t *testing.T, ctx context.Context, cls []*tcpClient, n int) (admitted, waiting []*tcpClient) {
	t.Helper()
	pending := append([]*tcpClient(nil), cls...)
	for len(admitted) < n {
		progressed := false
		for i := 0; i < len(pending); i++ {
			select {
			case err := <-pending[i].echoed:
				if err != nil {
					t.Fatalf("a connection ended before its echo: %v", err)
				}
				admitted = append(admitted, pending[i])
				pending = append(pending[:i], pending[i+1:]...)
				i--
				progressed = true
			default:
			}
		}
		if !progressed {
			select {
			case <-ctx.Done():
				t.Fatalf("%d of %d connections admitted, want %d", len(admitted), len(cls), n)
			case <-time.After(10 * time.Millisecond): // polling interval, with a deadline
			}
		}
	}
	return admitted, pending
}

// More connections than the limit: the upstream never sees more than the
// limit open, the others wait in the bulkhead's queue and proceed, one for
// one, as admitted ones close; every permit comes back with its
// connection's end entry. A bulkhead without a queue has Envoy close the
// connection it rejects.
func TestConnectionBulkhead(t *testing.T) {
	cs := startConnStack(t, `
bulkheads:
  catalog: {max_concurrent: 5}
  pg: {max_concurrent: 3, max_queue: 10, max_wait: 2500ms, connections: {ports: [%d], priority: critical}}
  rdb: {max_concurrent: 1, max_queue: 0, connections: {ports: [%d]}}
`, []string{"pg", "rdb"}, func(p *envoy.Params) { p.ExtAuthzTimeout = 3 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pg := cs.echo["pg"]

	var cls []*tcpClient
	for range 6 {
		cls = append(cls, dialThrough(t, cs.port["pg"]))
	}
	admitted, waiting := waitAdmitted(t, ctx, cls, 3)
	cs.waitGauge("bulkhead_queued_calls", "pg", 3, 5*time.Second)
	if err := pg.WaitOpen(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for _, c := range waiting {
		if done, err := c.wait(0); done {
			t.Fatalf("a fourth connection went through (%v) while three held the permits", err)
		}
	}
	if v, _ := cs.metrics().Value("bulkhead_kind", map[string]string{"dependency": "pg", "kind": "connections"}); v != 1 {
		t.Errorf("bulkhead_kind{pg, connections} = %v, want 1", v)
	}
	if v := cs.counter("bulkhead_admitted_total", map[string]string{"dependency": "pg", "priority": "critical"}); v != 3 {
		t.Errorf("admitted critical = %v, want 3 (the bulkhead's connections.priority)", v)
	}

	// One closes: exactly one waiting connection proceeds.
	admitted[0].c.Close()
	next, waiting := waitAdmitted(t, ctx, waiting, 1)
	cs.waitGauge("bulkhead_queued_calls", "pg", 2, 5*time.Second)
	if err := pg.WaitOpen(ctx, 3); err != nil {
		t.Fatal(err)
	}
	// The rest close: the last two proceed.
	for _, c := range append(admitted[1:], next...) {
		c.c.Close()
	}
	last, _ := waitAdmitted(t, ctx, waiting, 2)
	for _, c := range last {
		c.c.Close()
	}
	cs.waitGauge("bulkhead_active_calls", "pg", 0, 5*time.Second)
	if err := pg.WaitOpen(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if pg.Accepted() != 6 || pg.Max() != 3 {
		t.Errorf("upstream accepted %d connections, at most %d at once; want 6, 3", pg.Accepted(), pg.Max())
	}
	if v := cs.counter("bulkhead_releases_total", map[string]string{"source": "access_log"}); v != 6 {
		t.Errorf("releases by access log = %v, want 6 (each connection's end entry)", v)
	}

	// No queue: the second connection is rejected, and Envoy closes it.
	held := dialThrough(t, cs.port["rdb"])
	if done, err := held.wait(5 * time.Second); !done || err != nil {
		t.Fatalf("first rdb connection: %v (done %v)", err, done)
	}
	rejected := dialThrough(t, cs.port["rdb"])
	done, err := rejected.wait(5 * time.Second)
	if !done || err == nil {
		t.Fatalf("a connection over the limit without a queue: echoed or open (%v, %v); want it closed by Envoy", err, done)
	}
	t.Logf("rejected connection ended: %v", err)
	if v := cs.counter("bulkhead_rejected_total", map[string]string{"dependency": "rdb", "reason": "queue_full"}); v != 1 {
		t.Errorf("rdb rejected queue_full = %v, want 1", v)
	}
	if n := cs.echo["rdb"].Accepted(); n != 1 {
		t.Errorf("the rdb upstream accepted %d connections, want 1", n)
	}
	held.c.Close()
	cs.waitGauge("bulkhead_active_calls", "rdb", 0, 5*time.Second)
}

// A connection open for longer than the lease TTL keeps its permit: each
// periodic TCP entry renews it, no permit expires, and the bulkhead stays
// full; its end entry then releases it at once.
func TestConnectionHeldPastLeaseTTL(t *testing.T) {
	const interval, ttl = 500 * time.Millisecond, time.Second
	cs := startConnStack(t, `
leases: {heartbeat_interval: 500ms, heartbeat_ttl: 1s, recovery_window: 625ms, sweep_interval: 100ms}
bulkheads:
  catalog: {max_concurrent: 5}
  pg: {max_concurrent: 1, max_queue: 0, connections: {ports: [%d]}}
`, []string{"pg"}, func(p *envoy.Params) { p.HeartbeatInterval = interval })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	held := dialThrough(t, cs.port["pg"])
	if done, err := held.wait(5 * time.Second); !done || err != nil {
		t.Fatalf("first connection: %v (done %v)", err, done)
	}
	since := time.Now()
	renewed := func() float64 {
		return cs.counter("bulkhead_access_log_entries_total", map[string]string{"result": "renewed"})
	}
	// Five periodic entries: the connection is open 2.5 TTLs.
	poll(t, ctx, "five periodic TCP entries renewing the permit", func() bool { return renewed() >= 5 })
	if open := time.Since(since); open < 2*ttl {
		t.Fatalf("premise: five renewals within %v, under two TTLs", open)
	}
	if v := cs.counter("bulkhead_permits_expired_total", map[string]string{"dependency": "pg"}); v != 0 {
		t.Fatalf("%v permits expired under an open connection", v)
	}
	if v := cs.gauge("bulkhead_active_calls", "pg"); v != 1 {
		t.Fatalf("active = %v after %v, want 1", v, time.Since(since).Round(time.Millisecond))
	}
	// Still full: another connection is rejected.
	if done, err := dialThrough(t, cs.port["pg"]).wait(5 * time.Second); !done || err == nil {
		t.Fatalf("a second connection while the first is open past its TTL: %v (done %v); want it closed", err, done)
	}
	if _, err := held.c.Write([]byte("still\n")); err != nil {
		t.Fatal(err)
	}
	t.Logf("connection open %v, %v renewals", time.Since(since).Round(time.Millisecond), renewed())

	closed := time.Now()
	held.c.Close()
	cs.waitGauge("bulkhead_active_calls", "pg", 0, 2*time.Second)
	t.Logf("permit back %v after the close", time.Since(closed).Round(time.Millisecond))
	if v := cs.counter("bulkhead_releases_total", map[string]string{"source": "access_log"}); v != 1 {
		t.Errorf("releases by access log = %v, want 1", v)
	}
	if done, err := dialThrough(t, cs.port["pg"]).wait(5 * time.Second); !done || err != nil {
		t.Fatalf("a connection after the close: %v (done %v); want it admitted", err, done)
	}
}

// Two Envoys share one connection bulkhead (each listens on its own port,
// both listed): together they never open more than the limit. One is
// SIGKILLed with connections open: the upstream sees them close, no end
// entry comes, and their permits come back by lease expiry within a few
// heartbeat intervals; the other Envoy's connections keep theirs.
func TestConnectionTwoEnvoysAndSIGKILL(t *testing.T) {
	port2 := endpoint(t, freePort(t)).Port // the second Envoy's
	cs := startConnStack(t, fmt.Sprintf(`
leases: {sweep_interval: 100ms}
bulkheads:
  catalog: {max_concurrent: 5}
  pg: {max_concurrent: 4, max_queue: 0, connections: {ports: [%%d, %d]}}
`, port2), []string{"pg"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The second Envoy: the same bulkhead, its own node and TCP port, to
	// the same upstream.
	p := envoy.Params{NodeID: "front-proxy-2", Bulkhead: endpoint(t, cs.grpcAddr),
		Routes:       []envoy.Route{{Name: "catalog", Prefix: "/catalog", Upstream: endpoint(t, cs.up["catalog"].Addr())}},
		TCPListeners: []envoy.TCPListener{{Name: "pg", Port: port2, Upstream: endpoint(t, cs.echo["pg"].Addr())}}}
	bootstrap, err := envoy.Render(p)
	if err != nil {
		t.Fatal(err)
	}
	var log2 testkit.SyncBuffer
	e2, err := envoyproc.Start(ctx, envoyproc.Options{Binary: envoyBin, ConfigYAML: bootstrap, Concurrency: 2, Stderr: &log2})
	if err != nil {
		t.Fatalf("second envoy: %v\n%s", err, log2.String())
	}
	t.Cleanup(func() {
		_ = e2.Kill()
		if t.Failed() {
			t.Logf("second envoy log:\n%s", tail(log2.String(), 3000))
		}
	})
	pg := cs.echo["pg"]

	// Two connections through each Envoy: the limit is full.
	var cls, fromSecond []*tcpClient
	for _, port := range []int{cs.port["pg"], cs.port["pg"], port2, port2} {
		c := dialThrough(t, port)
		if done, err := c.wait(5 * time.Second); !done || err != nil {
			t.Fatalf("connection %d: %v (done %v); want it admitted", len(cls), err, done)
		}
		cls = append(cls, c)
		if port == port2 {
			fromSecond = append(fromSecond, c)
		}
	}
	// One more through either Envoy is closed: the limit is mesh-wide.
	for _, port := range []int{cs.port["pg"], port2} {
		if done, err := dialThrough(t, port).wait(5 * time.Second); !done || err == nil {
			t.Fatalf("a fifth connection through port %d: %v (done %v); want it closed", port, err, done)
		}
	}
	if pg.Max() != 4 || pg.Accepted() != 4 {
		t.Fatalf("upstream: %d accepted, at most %d open; want 4, 4", pg.Accepted(), pg.Max())
	}

	killed := time.Now()
	if err := e2.Kill(); err != nil {
		t.Fatal(err)
	}
	want := 4 - len(fromSecond)
	if err := pg.WaitOpen(ctx, want); err != nil {
		t.Fatal(err)
	}
	cs.waitGauge("bulkhead_active_calls", "pg", float64(want), 3*heartbeatInterval+2*time.Second)
	t.Logf("%d permits of the SIGKILLed Envoy back %v after the kill", len(fromSecond), time.Since(killed).Round(time.Millisecond))
	if v := cs.counter("bulkhead_permits_expired_total", map[string]string{"dependency": "pg"}); v != float64(len(fromSecond)) {
		t.Errorf("expired = %v, want %d (the dead Envoy's)", v, len(fromSecond))
	}
	// Their room is usable again through the live Envoy.
	var more []*tcpClient
	for range len(fromSecond) {
		more = append(more, dialThrough(t, cs.port["pg"]))
	}
	waitAdmitted(t, ctx, more, len(more))
	if pg.Max() > 4 {
		t.Fatalf("upstream saw %d open, limit 4", pg.Max())
	}
	for _, c := range cls {
		c.c.Close()
	}
	for _, c := range more {
		c.c.Close()
	}
}

// A client that leaves while its connection waits: Envoy (1.40) does not
// notice while the network ext_authz filter holds the connection, so its
// Check keeps its place in the queue (observed: no cancel; the waiters
// time out at max_wait). When the permit frees first, the Check is granted
// to the departed client: Envoy then finds the connection closed, logs its
// end, and the permit comes back; nothing leaks.
func TestConnectionClientLeavesWhileWaiting(t *testing.T) {
	cs := startConnStack(t, `
bulkheads:
  catalog: {max_concurrent: 5}
  pg: {max_concurrent: 1, max_queue: 1, max_wait: 2s, connections: {ports: [%d]}}
`, []string{"pg"}, func(p *envoy.Params) { p.ExtAuthzTimeout = 3 * time.Second })
	held := dialThrough(t, cs.port["pg"])
	if done, err := held.wait(5 * time.Second); !done || err != nil {
		t.Fatalf("first connection: %v (done %v)", err, done)
	}
	gone := dialThrough(t, cs.port["pg"])
	cs.waitGauge("bulkhead_queued_calls", "pg", 1, 5*time.Second)
	gone.c.Close()
	held.c.Close() // the permit goes to the departed client's Check
	cs.waitGauge("bulkhead_queued_calls", "pg", 0, 5*time.Second)
	cs.waitGauge("bulkhead_active_calls", "pg", 0, 5*time.Second)
	// Observed with Envoy 1.40: the departed client's Check granted, its
	// connection opened upstream (its first bytes were held) and ended, and
	// both permits released by their end entries.
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"bulkhead_admitted_total", map[string]string{"dependency": "pg"}, 2},
		{"bulkhead_releases_total", map[string]string{"source": "access_log"}, 2},
		{"bulkhead_permits_expired_total", map[string]string{"dependency": "pg"}, 0},
	} {
		if v := cs.counter(c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	after := dialThrough(t, cs.port["pg"])
	if done, err := after.wait(5 * time.Second); !done || err != nil {
		t.Fatalf("a connection afterwards: %v (done %v); want it admitted", err, done)
	}
	after.c.Close()
}
