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

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
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
func TestSharesOnRedisReplicaKilled(t *testing.T) {
	srv := testkit.StartRedis(t)
	rdb := newRedisClient(t, srv.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	up, err := testbed.NewUpstream("orders", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	up.SetDelay(sharesDelay)
	cfgPath := filepath.Join(dir, "bulkhead.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, sharesRedisYAML, srv.Addr), 0o600); err != nil {
		t.Fatal(err)
	}
	type node struct {
		name   string
		daemon *daemonProc
		http   string
		log    testkit.SyncBuffer
		envoy  *envoyproc.Proc
		base   string
	}
	var envLog testkit.SyncBuffer
	nodes := []*node{{name: "a"}, {name: "b"}}
	grpc := map[string]string{}
	for _, n := range nodes {
		d, addrs := startDaemonProc(t, ctx, cfgPath, filepath.Join(dir, "addr-"+n.name+".json"), &n.log)
		n.daemon, n.http, grpc[n.name] = d, addrs["http"], addrs["grpc"]
	}
	for _, n := range nodes {
		// envoy-a lists both replicas, A first (its RTDS and LRS streams go
		// to A while A answers, then to B); envoy-b only B.
		p := envoy.Params{NodeID: "envoy-" + n.name, Bulkhead: endpoint(t, grpc[n.name]), SharesMaxRequest: 2 * time.Second,
			Routes: []envoy.Route{{Name: "orders", Prefix: "/orders", Upstream: endpoint(t, up.Addr()), Shares: true}}}
		if n.name == "a" {
			p.BulkheadReplicas = []envoy.Endpoint{endpoint(t, grpc["b"])}
		}
		bootstrap, err := envoy.Render(p)
		if err != nil {
			t.Fatal(err)
		}
		if n.envoy, err = envoyproc.Start(ctx, envoyproc.Options{Binary: envoyBin, ConfigYAML: bootstrap, Concurrency: 2, Stderr: &envLog}); err != nil {
			t.Fatalf("envoy-%s: %v\n%s", n.name, err, tail(envLog.String(), 4000))
		}
		addr, err := n.envoy.ListenerAddr(ctx, envoy.DefaultListenerName)
		if err != nil {
			t.Fatal(err)
		}
		n.base = "http://" + addr
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.envoy.Kill()
			if n.daemon != nil {
				n.daemon.stop(t)
			}
			if t.Failed() {
				t.Logf("replica %s log:\n%s", n.name, tail(n.log.String(), 6000))
			}
		}
		if t.Failed() {
			t.Logf("envoy log:\n%s", tail(envLog.String(), 3000))
		}
	})
	value := func(n *node, name string) float64 {
		ms, err := testbed.Scrape(ctx, "http://"+n.http+"/metrics")
		if err != nil {
			return 0
		}
		return ms.Sum(name, orders)
	}
	checks := func() (c float64) {
		for _, n := range nodes {
			if n.daemon != nil {
				c += value(n, "bulkhead_admitted_total") + value(n, "bulkhead_rejected_total")
			}
		}
		return c
	}
	load := func(n *node, rate float64, d time.Duration) func() testbed.Stats {
		_, wait := runLoad(t, ctx, testbed.LoadSpec{URL: n.base + "/orders", Rate: rate, Duration: d,
			MaxRequests: int(rate*d.Seconds()) + 1, MaxOutstanding: 200, Timeout: 5 * time.Second})
		return wait
	}
	for _, n := range nodes {
		poll(t, ctx, "envoy-"+n.name+" holds a share from replica "+n.name+"'s lease", func() bool {
			// A strict request wakes the lease; the share follows.
			load(n, 10, 100*time.Millisecond)()
			return value(n, "bulkhead_shares_envoys") == 1
		})
	}

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

	// Replica A dies while envoy-a runs 4 in flight under its share; half a
	// second later envoy-b asks for 25 (125%).
	leases := func() []string { return rdb.HKeys(ctx, "bulkhead:{orders}:cl").Val() }
	waitA := load(nodes[0], 40, 14*time.Second)
	time.Sleep(2 * time.Second) // envoy-a's load runs under its share before the kill
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
	if got := up.Max(); got > sharesLimit {
		t.Errorf("INVARIANT: the upstream saw %d concurrent requests on a limit of %d", got, sharesLimit)
	}
	if sb.OK() == 0 {
		t.Error("envoy-b was served nothing beside the dead replica's lease")
	}
	// envoy-a's streams moved to B: it gets a share from B's lease.
	poll(t, ctx, "envoy-a holds a share from replica B", func() bool {
		load(nodes[0], 10, 100*time.Millisecond)()
		return value(nodes[1], "bulkhead_shares_envoys") == 2
	})
	// Nothing left in use: Redis counts no permit per request and none in
	// the leases (B's share is idle: it reports its Envoy's use, 0).
	poll(t, ctx, "Redis counts no permit of orders in use", func() bool {
		v := rdb.HMGet(ctx, "bulkhead:{orders}:s", "inuse", "lused").Val()
		return len(v) == 2 && (v[0] == nil || v[0] == "0") && (v[1] == nil || v[1] == "0")
	})
}
