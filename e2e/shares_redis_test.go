//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// sharesRedisYAML is a replica on the Redis ledger (capacity leases, the
// default) with orders in mode auto. The layer's TTL, 8 s, is longer than a
// far capacity lease (6 ticks): a replica that dies leaves its Envoy
// running under its share longer than its lease would last, unless Redis
// keeps the lease for the shares' tail ((8 s + 2 s) x 1.05 + 250 ms).
const sharesRedisYAML = `listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
log: {level: debug}
ledger: {backend: redis, on_unavailable: fail_closed, redis: {address: %q, timeout: 100ms}}
shares: {ttl: 8s, max_request_duration: 2s, interval: 250ms}
bulkheads:
  orders: {max_concurrent: 20, max_queue: 40, max_wait: 500ms, shares: {mode: auto}}
`

// TestSharesOnRedisReplicaKilled: two replicas on one Redis hand out
// shares held from their capacity leases, envoy-a's from A (it lists A,
// then B) and envoy-b's from B: far from the limit the Envoys' requests
// take no Check. Then replica A is SIGKILLed while envoy-a runs under its
// share, and envoy-b floods (125% of the limit): B may not take A's
// capacity while envoy-a may still use its share (its layer's TTL after
// A's last word, then its requests' timeout), so Redis keeps A's lease
// that long, and the upstream never sees more than the limit. envoy-a's
// streams move to B, which hands it a share again. At the end Redis counts
// no permit in use.
// sharesRedisMesh is two replicas on one Redis, each reaching it through
// a proxy the test can cut (link), and an Envoy per replica: envoy-a lists
// A then B, envoy-b only B.
type sharesRedisMesh struct {
	t      *testing.T
	ctx    context.Context
	up     *testbed.Upstream
	rdb    *redis.Client
	nodes  []*sharesRedisNode
	envLog testkit.SyncBuffer
}

type sharesRedisNode struct {
	name   string
	daemon *daemonProc
	http   string
	log    testkit.SyncBuffer
	envoy  *envoyproc.Proc
	base   string
	link   *testkit.Proxy // the replica's way to Redis
}

func startSharesRedis(t *testing.T, ctx context.Context) *sharesRedisMesh {
	t.Helper()
	srv := testkit.StartRedis(t)
	m := &sharesRedisMesh{t: t, ctx: ctx, rdb: newRedisClient(t, srv.Addr)}
	dir := t.TempDir()
	m.up = sharesUpstream(t)
	m.nodes = []*sharesRedisNode{{name: "a"}, {name: "b"}}
	grpc := map[string]string{}
	for _, n := range m.nodes {
		n.link = testkit.StartProxy(t, srv.Addr)
		cfgPath := filepath.Join(dir, "bulkhead-"+n.name+".yaml")
		if err := os.WriteFile(cfgPath, fmt.Appendf(nil, sharesRedisYAML, n.link.Addr), 0o600); err != nil {
			t.Fatal(err)
		}
		d, addrs := startDaemonProc(t, ctx, cfgPath, filepath.Join(dir, "addr-"+n.name+".json"), &n.log)
		n.daemon, n.http, grpc[n.name] = d, addrs["http"], addrs["grpc"]
	}
	for _, n := range m.nodes {
		p := envoy.Params{NodeID: "envoy-" + n.name, Bulkhead: endpoint(t, grpc[n.name]), SharesMaxRequest: 2 * time.Second,
			Routes: []envoy.Route{{Name: "orders", Prefix: "/orders", Upstream: endpoint(t, m.up.Addr()), Shares: true}}}
		if n.name == "a" {
			p.BulkheadReplicas = []envoy.Endpoint{endpoint(t, grpc["b"])}
		}
		bootstrap, err := envoy.Render(p)
		if err != nil {
			t.Fatal(err)
		}
		if n.envoy, err = envoyproc.Start(ctx, envoyproc.Options{Binary: envoyBin, ConfigYAML: bootstrap, Concurrency: 2, Stderr: &m.envLog}); err != nil {
			t.Fatalf("envoy-%s: %v\n%s", n.name, err, tail(m.envLog.String(), 4000))
		}
		addr, err := n.envoy.ListenerAddr(ctx, envoy.DefaultListenerName)
		if err != nil {
			t.Fatal(err)
		}
		n.base = "http://" + addr
	}
	t.Cleanup(func() {
		for _, n := range m.nodes {
			_ = n.envoy.Kill()
			if n.daemon != nil {
				n.daemon.stop(t)
			}
			if t.Failed() {
				t.Logf("replica %s log:\n%s", n.name, tail(n.log.String(), 6000))
			}
		}
		if t.Failed() {
			t.Logf("envoy log:\n%s", tail(m.envLog.String(), 3000))
		}
	})
	for _, n := range m.nodes {
		poll(t, ctx, "envoy-"+n.name+" holds a share from replica "+n.name+"'s lease", func() bool {
			// A strict request wakes the lease; the share follows.
			m.load(n, 10, 100*time.Millisecond)()
			return m.value(n, "bulkhead_shares_envoys") == 1
		})
	}
	return m
}

// value reads a series of orders from replica n (0 when it does not answer).
func (m *sharesRedisMesh) value(n *sharesRedisNode, name string) float64 {
	ms, err := testbed.Scrape(m.ctx, "http://"+n.http+"/metrics")
	if err != nil {
		return 0
	}
	return ms.Sum(name, orders)
}

// checks counts the Checks the live replicas decided.
func (m *sharesRedisMesh) checks() (c float64) {
	for _, n := range m.nodes {
		if n.daemon != nil {
			c += m.value(n, "bulkhead_admitted_total") + m.value(n, "bulkhead_rejected_total")
		}
	}
	return c
}

// load sends rate requests a second to n's Envoy for d; wait for its stats.
func (m *sharesRedisMesh) load(n *sharesRedisNode, rate float64, d time.Duration) func() testbed.Stats {
	_, wait := runLoad(m.t, m.ctx, testbed.LoadSpec{URL: n.base + "/orders", Rate: rate, Duration: d,
		MaxRequests: int(rate*d.Seconds()) + 1, MaxOutstanding: 200, Timeout: 5 * time.Second})
	return wait
}

// leases are the replicas holding a capacity lease of orders in Redis.
func (m *sharesRedisMesh) leases() []string { return m.rdb.HKeys(m.ctx, "bulkhead:{orders}:cl").Val() }

// checkCap fails the test if the upstream ever saw more than the limit.
func (m *sharesRedisMesh) checkCap() {
	if got := m.up.Max(); got > sharesLimit {
		m.t.Errorf("INVARIANT: the upstream saw %d concurrent requests on a limit of %d", got, sharesLimit)
	}
}

// noneInUse waits until Redis counts no permit of orders in use but the
// shares': none per request, and in the leases only the permits the live
// replicas hold for their Envoys' (idle) shares.
func (m *sharesRedisMesh) noneInUse() {
	var last []any
	var shares float64
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	for {
		last, shares = m.rdb.HMGet(m.ctx, "bulkhead:{orders}:s", "inuse", "lused").Val(), 0
		for _, n := range m.nodes {
			if n.daemon != nil {
				shares += m.value(n, "bulkhead_shares_permits")
			}
		}
		if len(last) == 2 && (last[0] == nil || last[0] == "0") && fmt.Sprint(last[1]) == fmt.Sprint(shares) {
			return
		}
		select {
		case <-ctx.Done():
			m.t.Fatalf("Redis counts %v of orders in use per request and %v in the leases; the replicas hold %v for shares", last[0], last[1], shares)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestSharesOnRedisReplicaKilled(t *testing.T) {
	parallelE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := startSharesRedis(t, ctx)
	nodes, up, load, checks, leases := m.nodes, m.up, m.load, m.checks, m.leases
	value := m.value

	// Far from the limit: 2 in flight at each Envoy (20% over the mesh;
	// Redis grants leases far from the limit while twice the replicas'
	// peaks fit in it).
	before := checks()
	wa, wb := load(nodes[0], 20, 3*time.Second), load(nodes[1], 20, 3*time.Second)
	far := testbed.MergeStats(wa(), wb())
	farChecks := checks() - before
	t.Logf("20%% over two replicas: %d requests, %d OK, %d rejected; %v Checks reached the replicas; upstream peak %d",
		far.Responses(), far.OK(), far.Count(503), farChecks, up.Max())
	if farChecks > float64(far.Responses())/10 {
		t.Errorf("far from the limit %v of %d requests took the ext_authz hop: shares held from the leases should have admitted them", farChecks, far.Responses())
	}
	if far.Count(503) > 0 {
		t.Errorf("far from the limit %d of %d requests were rejected", far.Count(503), far.Responses())
	}

	// Replica A dies while envoy-a runs 3 in flight under its share (30%:
	// far from the limit for Redis, twice the peaks within it, even on a
	// busy machine, where requests take longer); half a second later
	// envoy-b asks for 25 (125%).
	strictKey := shares.StrictKey("orders")
	waitA := load(nodes[0], 30, 14*time.Second)
	poll(t, ctx, "envoy-a runs its load under its share", func() bool {
		return runtimeIntAt(nodes[0].envoy.AdminAddr(), strictKey) == 0 && up.Inflight() > 0
	})
	held := leases()
	if len(held) != 2 {
		t.Fatalf("capacity leases of orders before the kill: %v, want one per replica", held)
	}
	nodes[0].daemon.kill(t)
	nodes[0].daemon = nil
	killed := time.Now()
	time.Sleep(500 * time.Millisecond)
	waitB := load(nodes[1], 250, 12*time.Second)
	var reclaimed time.Duration
	poll(t, ctx, "replica A's lease reclaimed by Redis", func() bool {
		l := leases()
		if slices.ContainsFunc(held, func(r string) bool { return !slices.Contains(l, r) }) {
			reclaimed = time.Since(killed)
			return true
		}
		return false
	})
	sa, sb := waitA(), waitB()
	t.Logf("replica A SIGKILLed: its lease reclaimed by Redis %v later (tail 10.75 s after its last layer, sent at most 2.7 s before the kill)",
		reclaimed.Round(100*time.Millisecond))
	t.Logf("envoy-a across the kill (then served by B): %d requests, %d OK, %d rejected; envoy-b at 125%%: %d requests, %d OK, %d rejected; upstream peak %d of %d",
		sa.Responses(), sa.OK(), sa.Responses()-sa.OK(), sb.Responses(), sb.OK(), sb.Count(503), up.Max(), sharesLimit)
	if reclaimed < 8*time.Second {
		t.Errorf("Redis reclaimed the dead replica's lease %v after the kill: before its Envoy's share could have run out (its layer's TTL, 8 s)", reclaimed)
	}
	m.checkCap()
	if sb.OK() == 0 {
		t.Error("envoy-b was served nothing beside the dead replica's lease")
	}
	// envoy-a's streams moved to B: it gets a share from B's lease.
	poll(t, ctx, "envoy-a holds a share from replica B", func() bool {
		load(nodes[0], 10, 100*time.Millisecond)()
		return value(nodes[1], "bulkhead_shares_envoys") == 2
	})
	m.noneInUse()
}

// TestSharesOnRedisReplicaCutOff: replica B is cut off from Redis (its
// link hangs) while envoy-b stays connected to it and runs 3 in flight
// under its share. B withdraws the share at its lease's end by its own
// clock (envoy-b then runs strict, and B, without Redis, fails closed);
// Redis keeps B's lease counted for the shares' tail after that end; and
// envoy-a floods (125%) meanwhile: the upstream never sees more than the
// limit. Healed, B hands envoy-b a share again, and nothing stays in use.
func TestSharesOnRedisReplicaCutOff(t *testing.T) {
	parallelE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := startSharesRedis(t, ctx)
	a, b := m.nodes[0], m.nodes[1]
	strictKey := shares.StrictKey("orders")
	waitB := m.load(b, 30, 14*time.Second) // 3 in flight: see TestSharesOnRedisReplicaKilled
	poll(t, ctx, "envoy-b runs its load under its share", func() bool {
		return runtimeIntAt(b.envoy.AdminAddr(), strictKey) == 0 && m.up.Inflight() > 0
	})
	held := m.leases()
	if len(held) != 2 || runtimeIntAt(b.envoy.AdminAddr(), strictKey) != 0 {
		t.Fatalf("before the cut: leases %v (want one per replica), envoy-b's %s %d (want 0: its share)",
			held, strictKey, runtimeIntAt(b.envoy.AdminAddr(), strictKey))
	}
	b.link.Hang()
	cut := time.Now()
	time.Sleep(500 * time.Millisecond)
	waitA := m.load(a, 250, 12*time.Second)
	var withdrawn, reclaimed time.Duration
	poll(t, ctx, "envoy-b told to run strict, and B's lease reclaimed by Redis", func() bool {
		if withdrawn == 0 && runtimeIntAt(b.envoy.AdminAddr(), strictKey) == 100 {
			withdrawn = time.Since(cut)
		}
		l := m.leases()
		if reclaimed == 0 && slices.ContainsFunc(held, func(r string) bool { return !slices.Contains(l, r) }) {
			reclaimed = time.Since(cut)
		}
		return withdrawn > 0 && reclaimed > 0
	})
	sa, sb := waitA(), waitB()
	t.Logf("replica B cut off from Redis: envoy-b's share withdrawn %v after the cut, B's lease reclaimed %v after it (tail 10.75 s)",
		withdrawn.Round(100*time.Millisecond), reclaimed.Round(100*time.Millisecond))
	t.Logf("envoy-b across the cut: %d requests, %d OK, %d rejected; envoy-a at 125%%: %d requests, %d OK, %d rejected; upstream peak %d of %d",
		sb.Responses(), sb.OK(), sb.Responses()-sb.OK(), sa.Responses(), sa.OK(), sa.Responses()-sa.OK(), m.up.Max(), sharesLimit)
	// A far lease lasts 6 ticks (6 s) from its last renewal, before the
	// cut; the share goes at the next response after its end.
	if withdrawn > 7*time.Second {
		t.Errorf("envoy-b's share withdrawn %v after the cut: after its lease's end (at most 6 s)", withdrawn)
	}
	if reclaimed-withdrawn < 10*time.Second {
		t.Errorf("Redis reclaimed B's lease %v after the share was withdrawn: before envoy-b could have stopped using it (tail 10.75 s)", reclaimed-withdrawn)
	}
	m.checkCap()
	if sa.OK() == 0 {
		t.Error("envoy-a was served nothing beside the cut-off replica's lease")
	}
	b.link.Pass()
	poll(t, ctx, "envoy-b holds a share from B again", func() bool {
		m.load(b, 10, 100*time.Millisecond)()
		return runtimeIntAt(b.envoy.AdminAddr(), strictKey) == 0 && m.value(b, "bulkhead_shares_envoys") == 1
	})
	m.noneInUse()
}
