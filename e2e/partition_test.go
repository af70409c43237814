//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// replicaMetrics scrapes replica i.
func (rs *replicaStack) replicaMetrics(ctx context.Context, i int) *testbed.Metrics {
	rs.t.Helper()
	m, err := testbed.Scrape(ctx, "http://"+rs.replicas[i].http+"/metrics")
	if err != nil {
		rs.t.Fatalf("replica %d metrics: %v", i, err)
	}
	return m
}

// One replica cut off from Redis but not from Envoy, with the default
// policy (fail_closed): three replicas, two Envoys with gRPC health checks,
// requests of 5 s (longer than a lease, 3 s) at 10/s through each Envoy on a
// limit of 5 (normal ceiling 4). The link to Redis of the replica that renews
// the most leases goes silent for
// 7 s (TCP holds the bytes; nothing is refused), then heals. The periodic
// entries that reached it must renew their leases elsewhere before
// they run out, or the others admit past the limit (before the fix: 8 and
// 6 at once in two runs). The upstream never sees more than the ceiling.
func TestSharedLedgerReplicaCutOffFromRedis(t *testing.T) {
	srv := testkit.StartRedis(t)
	links := make([]*testkit.Proxy, 3)
	for i := range links {
		links[i] = testkit.StartProxy(t, srv.Addr)
	}
	rs := startReplicaStack(t, replicaSpec{
		ledgerOf: func(i int) string { return redisLedger(links[i].Addr) },
		yaml:     "bulkheads:\n  catalog: {max_concurrent: 5, max_queue: 4, max_wait: 200ms, reserve: {critical: 0.2}}\n",
		replicas: 3, envoys: 2, rdb: newRedisClient(t, srv.Addr),
	})
	rs.settle = 10 * time.Second // the last requests end 5 s after the load
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	up := rs.up["catalog"]
	up.SetDelay(5 * time.Second)

	const rate, before, cut, after = 10.0, 3 * time.Second, 7 * time.Second, 6 * time.Second
	var waits []func() testbed.Stats
	for _, base := range rs.bases {
		_, wait := runLoad(t, ctx, testbed.LoadSpec{URL: base + "/catalog", Rate: rate, Duration: before + cut + after,
			MaxRequests: int(rate*(before+cut+after).Seconds()) + 1, MaxOutstanding: 200, Timeout: 15 * time.Second})
		waits = append(waits, wait)
	}
	poll(t, ctx, "the ceiling reached", func() bool { return up.Inflight() == 4 })
	time.Sleep(before) // into the load: the fault's moment, not a synchronisation
	// Cut the replica that renews the most leases: the running requests'
	// heartbeats reach it (each Envoy worker's stream goes to one replica).
	cutOff, renewed := -1, 0.0
	for i := range rs.replicas {
		n := rs.replicaMetrics(ctx, i).Sum("bulkhead_access_log_entries_total", map[string]string{"result": "renewed"})
		if n > renewed {
			cutOff, renewed = i, n
		}
	}
	if cutOff < 0 {
		t.Fatal("no replica renewed a lease: the requests' periodic entries reach none")
	}
	rs.point((cutOff + 1) % len(rs.replicas)) // the stack reads a replica that reaches Redis
	links[cutOff].Hang()
	cutAt := time.Now()
	poll(t, ctx, "the cut-off replica unavailable", func() bool {
		v, _ := rs.replicaMetrics(ctx, cutOff).Value("bulkhead_ledger_state", map[string]string{"state": "unavailable"})
		return v == 1
	})
	noticed := time.Since(cutAt)
	time.Sleep(cut - noticed) // the partition's length
	links[cutOff].Pass()
	healed := time.Now()
	poll(t, ctx, "the cut-off replica strict again", func() bool {
		v, _ := rs.replicaMetrics(ctx, cutOff).Value("bulkhead_ledger_state", map[string]string{"state": "strict"})
		return v == 1
	})
	strictAfter := time.Since(healed)
	var all []testbed.Stats
	for _, w := range waits {
		all = append(all, w())
	}
	st := testbed.MergeStats(all...)
	moved := rs.replicaMetrics(ctx, cutOff).Sum("bulkhead_access_log_entries_total", map[string]string{"result": "ledger_unavailable"})
	var adopted float64
	for i := range rs.replicas {
		adopted += rs.replicaMetrics(ctx, i).Sum("bulkhead_permits_adopted_total", nil)
	}
	t.Logf("replica %d cut from Redis for %v (noticed after %v, strict %v after healing): %s; upstream max %d, ceiling 4; "+
		"it renewed %v leases before the cut, refused %v entries while cut off; adoptions %v",
		cutOff, cut, noticed.Round(time.Millisecond), strictAfter.Round(time.Millisecond), summary(st), up.Max(), renewed, moved, adopted)
	if up.Max() > 4 {
		t.Fatalf("OVER-ADMISSION: upstream saw %d requests at once across a replica's partition from Redis, normal ceiling 4 (limit 5)", up.Max())
	}
	if st.OK() == 0 {
		t.Fatal("nothing admitted")
	}
}
