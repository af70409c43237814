//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// redisLedger is a replica's ledger on Redis at addr with fail_closed, on
// the daemon's default path: capacity leases, unless
// BULKHEAD_E2E_CAPACITY_LEASES=0 (capacityLeases).
func redisLedger(addr string) string {
	return sharedLedger("fail_closed", fmt.Sprintf("address: %q", addr))
}

// leasedLedger is redisLedger with capacity leases, always: the tests of
// the leases themselves.
func leasedLedger(addr string) string {
	return ledgerSection("fail_closed", fmt.Sprintf("address: %q", addr), true)
}

// perRequestLedger is redisLedger without capacity leases, always: the
// tests of the per-request path (every admission a script in Redis's
// global queue).
func perRequestLedger(addr string) string {
	return ledgerSection("fail_closed", fmt.Sprintf("address: %q", addr), false)
}

// capacityLeases is whether the shared-ledger tests that follow the
// daemon's default run with capacity leases, as the daemon does by default
// (ledger.redis.capacity_leases: true); BULKHEAD_E2E_CAPACITY_LEASES=0 runs
// them on the per-request path instead.
var capacityLeases = os.Getenv("BULKHEAD_E2E_CAPACITY_LEASES") != "0"

// sharedLedger is the ledger section of a replica on Redis with policy,
// where is how it finds Redis (address or sentinel), capacity leases on
// with capacityLeases. local_share, deprecated, is written as an old
// configuration has it: without capacity_leases (it turns them on).
func sharedLedger(policy, where string) string {
	if policy == "local_share" {
		return fmt.Sprintf("ledger: {backend: redis, on_unavailable: local_share, redis: {%s, timeout: 100ms}}", where)
	}
	return ledgerSection(policy, where, capacityLeases)
}

func ledgerSection(policy, where string, leases bool) string {
	return fmt.Sprintf("ledger: {backend: redis, on_unavailable: %s, redis: {%s, timeout: 100ms, capacity_leases: %v}}",
		policy, where, leases)
}

func newRedisClient(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// floodBoth drives path through every Envoy of rs at rate each for d.
func floodBoth(t *testing.T, ctx context.Context, rs *replicaStack, path string, rate float64, d time.Duration) testbed.Stats {
	t.Helper()
	var waits []func() testbed.Stats
	for _, base := range rs.bases {
		_, wait := runLoad(t, ctx, testbed.LoadSpec{URL: base + path, Rate: rate, Duration: d,
			MaxRequests: int(rate*d.Seconds()) + 1, MaxOutstanding: 200, Timeout: 10 * time.Second})
		waits = append(waits, wait)
	}
	var all []testbed.Stats
	for _, w := range waits {
		all = append(all, w())
	}
	return testbed.MergeStats(all...)
}

// summary is what a log line says of a load.
func summary(st testbed.Stats) string {
	return fmt.Sprintf("sent %d, ok %d, rejected %d %v, errors %d", st.Sent, st.OK(), st.Rejections, st.ByReason, st.Errors())
}

// Many replicas, one limit: three replicas behind two Envoys hold catalog's
// limit under a flood; a replica SIGKILLed under load leaks nothing and lets
// nothing past the limit. With capacity leases: the killed replica's lease
// is reclaimed at its end, its running requests adopted.
func TestSharedLedgerFloodAndReplicaKill(t *testing.T) {
	srv := testkit.StartRedis(t)
	rs := startReplicaStack(t, replicaSpec{
		ledger:   leasedLedger(srv.Addr),
		yaml:     "bulkheads:\n  catalog: {max_concurrent: 6, max_queue: 6, max_wait: 300ms}\n",
		replicas: 3, envoys: 2, rdb: newRedisClient(t, srv.Addr),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	up := rs.up["catalog"]
	up.SetDelay(60 * time.Millisecond)

	st := floodBoth(t, ctx, rs, "/catalog", 150, 3*time.Second)
	t.Logf("flood through 2 Envoys and 3 replicas: %s; upstream max %d of 6", summary(st), up.Max())
	if up.Max() != 6 {
		t.Fatalf("upstream saw at most %d concurrent requests, want the limit 6 (over: a replica admitted alone; under: the flood did not fill it)", up.Max())
	}
	if st.Rejections == 0 {
		t.Fatal("a flood at 3x the capacity had no rejection")
	}
	rs.waitGauge("bulkhead_active_calls", "catalog", 0, 5*time.Second)

	// SIGKILL a replica in the middle of a flood.
	up.ResetMax()
	var wg sync.WaitGroup
	var st2 testbed.Stats
	wg.Add(1)
	go func() { defer wg.Done(); st2 = floodBoth(t, ctx, rs, "/catalog", 150, 4*time.Second) }()
	time.Sleep(1500 * time.Millisecond) // into the flood: the fault's moment, not a synchronisation
	killed := time.Now()
	rs.killReplica(1)
	wg.Wait()
	t.Logf("replica SIGKILLed 1.5s into a 4s flood: %s; upstream max %d of 6", summary(st2), up.Max())
	if up.Max() > 6 {
		t.Fatalf("INVARIANT: upstream saw %d concurrent requests after a replica died, limit 6", up.Max())
	}
	// Its permits live in Redis: released by the access logs the other
	// replicas receive, or by lease expiry. Nothing stays held.
	poll(t, ctx, "no permit held in Redis", func() bool { return rs.inUse(ctx, "catalog") == 0 })
	t.Logf("all permits back %v after the kill", time.Since(killed).Round(time.Millisecond))
}

// With worker affinity (envoy.Params.BulkheadAffinity) each Envoy worker
// keeps one replica for its Checks and its access-log streams: with
// capacity leases, every entry reaches the replica that admitted its
// request, and none is forwarded through Redis (balanced per call, about
// half are). A replica SIGKILLed under load: its workers move to the
// other once its health check fails, the cap holds, nothing stays held.
func TestSharedLedgerLeasesWithWorkerAffinity(t *testing.T) {
	srv := testkit.StartRedis(t)
	const limit = 40
	rs := startReplicaStack(t, replicaSpec{
		ledger:   leasedLedger(srv.Addr),
		yaml:     fmt.Sprintf("bulkheads:\n  catalog: {max_concurrent: %d, max_queue: 10, max_wait: 300ms}\n", limit),
		replicas: 2, envoys: 1, rdb: newRedisClient(t, srv.Addr),
		envoy: func(p *envoy.Params) { p.BulkheadAffinity = true },
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	up := rs.up["catalog"]
	up.SetDelay(20 * time.Millisecond)
	sum := func(name string, labels map[string]string, replicas ...int) (n float64) {
		for _, i := range replicas {
			n += rs.replicaMetrics(ctx, i).Sum(name, labels)
		}
		return n
	}
	// Far from the limit: 200 requests a second of 20 ms, about 4 in flight.
	st := floodBoth(t, ctx, rs, "/catalog", 200, 3*time.Second)
	poll(t, ctx, "every permit back", func() bool {
		return sum("bulkhead_ledger_lease_in_use", map[string]string{"dependency": "catalog"}, 0, 1) == 0 && rs.inUse(ctx, "catalog") == 0
	})
	fromLeases := sum("bulkhead_ledger_lease_admitted_total", map[string]string{"dependency": "catalog"}, 0, 1)
	forwarded := sum("bulkhead_access_log_entries_total", map[string]string{"result": "forwarded"}, 0, 1)
	released := sum("bulkhead_access_log_entries_total", map[string]string{"result": "released"}, 0, 1)
	t.Logf("two replicas with leases, each Envoy worker on one: %s; admitted from leases %.0f, entries released %.0f, forwarded %.0f; upstream max %d of %d",
		summary(st), fromLeases, released, forwarded, up.Max(), limit)
	if st.OK() != st.Sent || fromLeases < float64(st.OK())/2 {
		t.Fatalf("far from the limit: %s, %.0f admitted from leases; want every request through, most from the leases", summary(st), fromLeases)
	}
	if forwarded > 0 {
		t.Fatalf("%.0f access-log entries forwarded through Redis, want none: each worker's entries should reach the replica of its Checks", forwarded)
	}

	// SIGKILL the replica that admitted most (both workers may be on one)
	// in the middle of the load.
	victim, survivor := 0, 1
	if sum("bulkhead_ledger_lease_admitted_total", nil, 1) > sum("bulkhead_ledger_lease_admitted_total", nil, 0) {
		victim, survivor = 1, 0
	}
	up.ResetMax()
	var wg sync.WaitGroup
	var st2 testbed.Stats
	wg.Add(1)
	go func() { defer wg.Done(); st2 = floodBoth(t, ctx, rs, "/catalog", 200, 4*time.Second) }()
	time.Sleep(time.Second) // into the load: the fault's moment, not a synchronisation
	killed := time.Now()
	rs.killReplica(victim)
	wg.Wait()
	t.Logf("replica %d SIGKILLed 1 s into a 4 s load: %s; upstream max %d of %d", victim, summary(st2), up.Max(), limit)
	if up.Max() > limit {
		t.Fatalf("INVARIANT: upstream saw %d concurrent requests after a replica died, limit %d", up.Max(), limit)
	}
	// Redis reclaims the dead replica's lease at its end, then pauses the
	// bulkhead for the recovery window (its requests may still run). Then
	// the survivor serves every worker.
	rdb := rs.rdb
	poll(t, ctx, "the dead replica's lease reclaimed and the recovery window over", func() bool {
		n, _ := rdb.HLen(ctx, "bulkhead:{catalog}:cl").Result()
		ru, _ := rdb.HGet(ctx, "bulkhead:{catalog}:s", "ru").Int64()
		now, _ := rdb.Time(ctx).Result()
		return n <= 1 && now.UnixMilli() > ru
	})
	st3 := floodBoth(t, ctx, rs, "/catalog", 100, time.Second)
	if st3.OK() != st3.Sent {
		t.Fatalf("%v after the kill: %s, want every request through the surviving replica", time.Since(killed).Round(time.Millisecond), summary(st3))
	}
	poll(t, ctx, "every permit back at the survivor and in Redis", func() bool {
		return sum("bulkhead_ledger_lease_in_use", map[string]string{"dependency": "catalog"}, survivor) == 0 && rs.inUse(ctx, "catalog") == 0
	})
	t.Logf("all permits back %v after the kill", time.Since(killed).Round(time.Millisecond))
}

// The priority and shedding scenario of TestPriority, its waiters spread
// over three replicas, on the per-request path (no capacity leases): the
// order is global. TestSharedLedgerPriorityWithLeases is the same with
// leases.
func TestSharedLedgerPriority(t *testing.T) {
	srv := testkit.StartRedis(t)
	rs := startReplicaStack(t, replicaSpec{
		ledger: perRequestLedger(srv.Addr),
		yaml: `authz: {trusted_priority_sources: ["127.0.0.0/8"]}
bulkheads:
  catalog: {max_concurrent: 10, max_queue: 3, max_wait: 4s, reserve: {critical: 0.2, normal: 0.1}}
`,
		replicas: 3, envoys: 1, rdb: newRedisClient(t, srv.Addr),
		envoy: func(p *envoy.Params) { p.ExtAuthzTimeout = 6 * time.Second },
	})
	priorityScenario(t, rs.stack, func() []*testbed.Metrics {
		var ms []*testbed.Metrics
		for _, r := range rs.replicas {
			m, err := testbed.Scrape(context.Background(), "http://"+r.http+"/metrics")
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		return ms
	})
}

// The global queue's order across replicas with capacity leases in play:
// three replicas hold leases far from the limit and admit from them; at
// the limit, waiters queued at any replica are granted critical first,
// FIFO within a class, as the running requests end one by one (each freed
// permit, from a lease or not, goes to the head of Redis's queue), and a
// full queue sheds its youngest lowest-class waiter.
func TestSharedLedgerPriorityWithLeases(t *testing.T) {
	srv := testkit.StartRedis(t)
	const limit = 12
	rs := startReplicaStack(t, replicaSpec{
		ledger: leasedLedger(srv.Addr),
		yaml: fmt.Sprintf(`authz: {trusted_priority_sources: ["127.0.0.0/8"]}
bulkheads:
  catalog: {max_concurrent: %d, max_queue: 5, max_wait: 20s}
`, limit),
		replicas: 3, envoys: 1, rdb: newRedisClient(t, srv.Addr),
		envoy: func(p *envoy.Params) { p.ExtAuthzTimeout = 25 * time.Second },
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leased := func() (permits float64) {
		for i := range rs.replicas {
			permits += rs.replicaMetrics(ctx, i).Sum("bulkhead_ledger_lease_permits", map[string]string{"dependency": "catalog"})
		}
		return permits
	}
	poll(t, ctx, "the replicas hold leases of catalog", func() bool { return leased() >= 3 })
	up := rs.up["catalog"]
	up.TrackServed()
	// The limit, held; once let go, the running requests end 600 ms apart.
	up.Hold()
	var held []<-chan response
	for i := range limit {
		held = append(held, rs.getAsync(ctx, "/catalog", map[string]string{testbed.HeaderDelay: fmt.Sprint(time.Duration(i) * 600 * time.Millisecond)}))
	}
	if err := up.WaitInflight(ctx, limit); err != nil {
		t.Fatal(err)
	}
	var fromLeases float64
	for i := range rs.replicas {
		fromLeases += rs.replicaMetrics(ctx, i).Sum("bulkhead_ledger_lease_admitted_total", map[string]string{"dependency": "catalog"})
	}
	if fromLeases == 0 {
		t.Fatal("no admission came from a lease: the test would not show the order with leases in play")
	}
	queued := func() int {
		n := 0
		for _, q := range []string{"q1", "q2", "q3"} {
			n += int(rs.rdb.ZCard(ctx, "bulkhead:{catalog}:"+q).Val())
		}
		return n
	}
	// Waiters, one at a time (each queued before the next is sent), spread
	// over the replicas by Envoy; each runs 5 s once admitted.
	waiters := map[string]<-chan response{}
	for i, w := range []string{"be1", "n1", "be2", "c1", "n2", "c2"} {
		class := map[byte]string{'b': "best_effort", 'n': "normal", 'c': "critical"}[w[0]]
		waiters[w] = rs.getAsync(ctx, "/catalog", map[string]string{"x-bulkhead-priority": class,
			testbed.HeaderTag: w, testbed.HeaderDelay: "5s"})
		if w == "c2" {
			break // the queue is full: c2 sheds be2 (below)
		}
		poll(t, ctx, fmt.Sprintf("%d waiters queued in Redis", i+1), func() bool { return queued() == i+1 })
	}
	select {
	case r := <-waiters["be2"]:
		if r.status != 503 || r.header.Get("x-bulkhead-reason") != "shed" {
			t.Fatalf("the youngest best_effort waiter got %d %q, want 503 shed", r.status, r.header.Get("x-bulkhead-reason"))
		}
	case <-ctx.Done():
		t.Fatal("the youngest best_effort waiter was not shed")
	}
	poll(t, ctx, "5 waiters queued in Redis", func() bool { return queued() == 5 })
	let := up.Elapsed()
	up.ReleaseHeld()
	want := []string{"c1", "c2", "n1", "n2", "be1"}
	for _, w := range want {
		if r := <-waiters[w]; r.err != nil || r.status != 200 {
			t.Fatalf("waiter %s: %d %v", w, r.status, r.err)
		}
	}
	for _, ch := range held {
		if r := <-ch; r.err != nil || r.status != 200 {
			t.Fatalf("held request: %d %v", r.status, r.err)
		}
	}
	spans := up.ServedSpans()
	slices.SortFunc(spans, func(a, b testbed.Span) int { return cmp.Compare(a.Start, b.Start) })
	var got, starts []string
	var lag time.Duration // the longest, after the held request whose permit the waiter took
	for _, sp := range spans {
		if sp.Tag != "" {
			ended := time.Duration(len(got)) * 600 * time.Millisecond
			lag = max(lag, sp.Start-let-ended)
			got = append(got, sp.Tag)
			starts = append(starts, fmt.Sprintf("%s at %v", sp.Tag, (sp.Start-let).Round(10*time.Millisecond)))
		}
	}
	t.Logf("admitted from leases while filling: %.0f of %d; waiters admitted in order %v (since the held requests were let go, "+
		"one ending each 600 ms: %s; the longest wait after a permit ended %v); upstream max %d of %d",
		fromLeases, limit, got, strings.Join(starts, ", "), lag.Round(time.Millisecond), up.Max(), limit)
	if !slices.Equal(got, want) {
		t.Fatalf("waiters admitted in order %v, want %v (critical first, FIFO within a class)", got, want)
	}
	// A permit freed from a lease goes to the queue at once (the lease loop
	// gives it back); one Redis adopted twice (a periodic entry of it that
	// reached another replica in the adoption window) stayed in use until
	// its lease's copy expired, 1.2-2.8 s.
	if lag > time.Second {
		t.Fatalf("a waiter was admitted %v after the permit it took was freed, want well under a second", lag.Round(time.Millisecond))
	}
	if up.Max() > limit {
		t.Fatalf("INVARIANT: upstream saw %d concurrent requests, limit %d", up.Max(), limit)
	}
}

// Redis restarted empty under load: the running requests' heartbeats
// rebuild the count before anyone new is admitted.
func TestSharedLedgerRedisRestart(t *testing.T) {
	srv := testkit.StartRedis(t)
	rs := startReplicaStack(t, replicaSpec{
		ledger:   redisLedger(srv.Addr),
		yaml:     "bulkheads:\n  orders: {max_concurrent: 4, max_queue: 4, max_wait: 200ms}\n",
		replicas: 3, envoys: 2, rdb: newRedisClient(t, srv.Addr),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	up := rs.up["orders"]
	held := holdRequests(t, ctx, rs, "orders", 4)
	srv.Kill()
	srv.Start()
	restarted := time.Now()
	// A flood from both Envoys while Redis holds nothing.
	var wg sync.WaitGroup
	var st testbed.Stats
	wg.Add(1)
	go func() { defer wg.Done(); st = floodBoth(t, ctx, rs, "/orders", 50, 4*time.Second) }()
	poll(t, ctx, "the 4 running requests counted again", func() bool { return rs.inUse(ctx, "orders") >= 4 })
	rebuilt := time.Since(restarted)
	wg.Wait()
	t.Logf("Redis restarted empty: count rebuilt from heartbeats in %v; flood %s; upstream max %d of 4 (over-admission %d)",
		rebuilt.Round(time.Millisecond), summary(st), up.Max(), max(0, up.Max()-4))
	if up.Max() > 4 {
		t.Fatalf("INVARIANT: upstream saw %d concurrent requests after Redis restarted, limit 4", up.Max())
	}
	if rebuilt > 3*time.Second {
		t.Fatalf("the count took %v to come back, more than 3 heartbeat intervals", rebuilt)
	}
	releaseHeld(t, up, held)
}

// A Sentinel failover under load (the master SIGKILLed): measure the time
// until every replica is strict again on the new master, the time until
// the running requests are counted there, and the over-admission seen at
// the upstream.
func TestSharedLedgerSentinelFailover(t *testing.T) {
	master := testkit.StartRedis(t)
	mh, mp := hostPort("http://" + master.Addr)
	replicaRedis := testkit.StartRedis(t, "--replicaof", mh, fmt.Sprint(mp))
	sentinel := testkit.StartSentinel(t, "bulkhead", master.Addr, 300*time.Millisecond)
	sentinelClient := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "bulkhead",
		SentinelAddrs: []string{sentinel.Addr}, MaxRetries: -1})
	t.Cleanup(func() { sentinelClient.Close() })
	rs := startReplicaStack(t, replicaSpec{
		ledger:   sharedLedger("fail_closed", fmt.Sprintf("sentinel: {master: bulkhead, addresses: [%q]}", sentinel.Addr)),
		yaml:     "bulkheads:\n  orders: {max_concurrent: 4, max_queue: 4, max_wait: 200ms}\n",
		replicas: 3, envoys: 2, rdb: sentinelClient,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	up := rs.up["orders"]
	held := holdRequests(t, ctx, rs, "orders", 4)
	replicaClient := newRedisClient(t, replicaRedis.Addr)
	poll(t, ctx, "the grants replicated", func() bool {
		v, err := replicaClient.HGet(ctx, "bulkhead:{orders}:s", "inuse").Int()
		return err == nil && v == 4
	})
	master.Kill()
	killed := time.Now()
	var wg sync.WaitGroup
	var st testbed.Stats
	wg.Add(1)
	go func() { defer wg.Done(); st = floodBoth(t, ctx, rs, "/orders", 50, 6*time.Second) }()
	// Each replica notices (a failed call: unavailable) and comes back
	// strict on the new master.
	strict := rs.waitBackStrict(ctx)
	poll(t, ctx, "the running requests counted on the new master", func() bool { return rs.inUse(ctx, "orders") >= 4 })
	counted := time.Since(killed)
	wg.Wait()
	t.Logf("Sentinel failover (master SIGKILLed, down-after 300ms): replicas strict again after %v, running requests counted after %v; "+
		"flood %s; upstream max %d of 4 (over-admission %d)",
		(strict.Sub(killed)).Round(time.Millisecond), counted.Round(time.Millisecond), summary(st), up.Max(), max(0, up.Max()-4))
	if up.Max() > 4 {
		t.Fatalf("INVARIANT: upstream saw %d concurrent requests across the failover, limit 4", up.Max())
	}
	releaseHeld(t, up, held)
}

// Each on_unavailable policy with Redis stopped under load, two replicas
// behind Envoy: fail_closed rejects with its own reason (but what the
// capacity leases held admit until their end), fail_open lets everything
// through, local_share (deprecated) is fail_closed with capacity leases;
// and each comes back strict when Redis does.
func TestSharedLedgerUnavailablePolicies(t *testing.T) {
	closed := func(leases bool) func(t *testing.T, st testbed.Stats, max int) {
		return func(t *testing.T, st testbed.Stats, max int) {
			// With capacity leases a replica admits within the lease it
			// holds until the lease's end; the rest is refused.
			if st.ByReason["ledger_unavailable"] == 0 || st.ByReason["ledger_unavailable"] != st.Sent-st.OK() ||
				(st.OK() > 0 && !leases) || max > 6 {
				t.Errorf("fail_closed with Redis down: %s, upstream max %d; want every request rejected ledger_unavailable "+
					"(capacity leases %v: but those admitted within the leases held, limit 6)", summary(st), max, leases)
			}
		}
	}
	for _, tc := range []struct {
		policy string
		check  func(t *testing.T, st testbed.Stats, max int)
	}{
		{"fail_closed", closed(capacityLeases)},
		{"fail_open", func(t *testing.T, st testbed.Stats, max int) {
			if st.OK() != st.Sent {
				t.Errorf("fail_open with Redis down: %s, want every request through", summary(st))
			}
		}},
		{"local_share", closed(true)},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := testkit.StartRedis(t)
			rs := startReplicaStack(t, replicaSpec{
				ledger:   sharedLedger(tc.policy, fmt.Sprintf("address: %q", srv.Addr)),
				yaml:     "bulkheads:\n  catalog: {max_concurrent: 6, max_queue: 6, max_wait: 300ms}\n",
				replicas: 2, envoys: 1, rdb: newRedisClient(t, srv.Addr),
			})
			if tc.policy == "fail_open" {
				rs.limits["catalog"] = 1 << 30 // no limit holds while Redis is down: that is the policy
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			up := rs.up["catalog"]
			up.SetDelay(50 * time.Millisecond)
			poll(t, ctx, "two live replicas", func() bool {
				v, _ := rs.metrics().Value("bulkhead_ledger_replicas", nil)
				return v == 2
			})
			srv.Kill()
			st := floodBoth(t, ctx, rs, "/catalog", 100, 2*time.Second)
			t.Logf("%s, Redis down: %s; upstream max %d", tc.policy, summary(st), up.Max())
			tc.check(t, st, up.Max())
			srv.Start()
			rs.waitStrict(ctx)
			up.ResetMax()
			st = floodBoth(t, ctx, rs, "/catalog", 100, time.Second)
			if up.Max() > 6 || st.OK() == 0 {
				t.Errorf("after Redis came back: %s, upstream max %d of 6", summary(st), up.Max())
			}
		})
	}
}

// holdRequests sends n requests to route through Envoy 0 and waits until
// its upstream holds them all (upstream.Hold).
func holdRequests(t *testing.T, ctx context.Context, rs *replicaStack, route string, n int) []<-chan response {
	t.Helper()
	up := rs.up[route]
	up.Hold()
	var held []<-chan response
	for range n {
		held = append(held, rs.getAsync(ctx, "/"+route, nil))
	}
	if err := up.WaitInflight(ctx, n); err != nil {
		t.Fatal(err)
	}
	return held
}

// releaseHeld lets the held requests finish and checks that each succeeded.
func releaseHeld(t *testing.T, up *testbed.Upstream, held []<-chan response) {
	t.Helper()
	up.ReleaseHeld()
	for _, ch := range held {
		if r := <-ch; r.err != nil || r.status != http.StatusOK {
			t.Fatalf("held request: %d %v", r.status, r.err)
		}
	}
}
