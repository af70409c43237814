//go:build e2e

package e2e

import (
	"context"
	"syscall"
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

// A replica that stops serving the data plane while running requests'
// heartbeats reach it, with the default policy (fail_closed): three
// replicas, two Envoys with gRPC health checks, requests of 5 s (longer than
// a lease, 3 s) at 10/s through each Envoy on a limit of 5 (normal ceiling
// 4). The replica that renews the most leases is cut for 7 s, then heals:
//
//   - its link to Redis goes silent (TCP holds the bytes; nothing is
//     refused): it closes its access-log streams and fails its health check
//     (before that fix: 8, 7 and 6 at once in three runs);
//   - it is paused (SIGSTOP): it can do nothing, and Envoy's HTTP/2 PINGs
//     (connection_keepalive) close its connections (before that fix: 5 at
//     once in a fault schedule).
//
// The periodic entries that reached it must renew their leases elsewhere
// before they run out, or the others admit past the limit. The upstream
// never sees more than the ceiling.
//
// With capacity leases the replica cut off for longer than its capacity
// lease (3 s) admits from it until its end by its own clock, Redis
// reclaims it after its end by Redis's, and the requests it admitted
// (which outlive the lease) are adopted where their periodic entries land.
func TestSharedLedgerReplicaCutOff(t *testing.T) {
	for _, tc := range []struct {
		name      string
		leases    bool
		cut, heal func(rs *replicaStack, links []*testkit.Proxy, i int)
	}{
		{"link to Redis silent", false,
			func(_ *replicaStack, links []*testkit.Proxy, i int) { links[i].Hang() },
			func(_ *replicaStack, links []*testkit.Proxy, i int) { links[i].Pass() }},
		{"link to Redis silent, capacity leases", true,
			func(_ *replicaStack, links []*testkit.Proxy, i int) { links[i].Hang() },
			func(_ *replicaStack, links []*testkit.Proxy, i int) { links[i].Pass() }},
		{"replica paused", false,
			func(rs *replicaStack, _ []*testkit.Proxy, i int) {
				_ = syscall.Kill(-rs.replicas[i].proc.cmd.Process.Pid, syscall.SIGSTOP)
			},
			func(rs *replicaStack, _ []*testkit.Proxy, i int) {
				_ = syscall.Kill(-rs.replicas[i].proc.cmd.Process.Pid, syscall.SIGCONT)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { replicaCutOff(t, tc.leases, tc.cut, tc.heal) })
	}
}

func replicaCutOff(t *testing.T, leases bool, cutOff, heal func(rs *replicaStack, links []*testkit.Proxy, i int)) {
	srv := testkit.StartRedis(t)
	links := make([]*testkit.Proxy, 3)
	for i := range links {
		links[i] = testkit.StartProxy(t, srv.Addr)
	}
	rs := startReplicaStack(t, replicaSpec{
		ledgerOf: func(i int) string {
			if leases {
				return leasedLedger(links[i].Addr)
			}
			return perRequestLedger(links[i].Addr)
		},
		// orders, far from its limit, holds generous leases: the victim
		// admits from its own while Envoy still sends it Checks.
		yaml: "bulkheads:\n  catalog: {max_concurrent: 5, max_queue: 4, max_wait: 200ms, reserve: {critical: 0.2}}\n" +
			"  orders: {max_concurrent: 20, max_queue: 4, max_wait: 200ms}\n",
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
		_, wait = runLoad(t, ctx, testbed.LoadSpec{URL: base + "/orders", Rate: 4 * rate, Duration: before + cut + after,
			MaxRequests: int(4*rate*(before+cut+after).Seconds()) + 1, MaxOutstanding: 200, Timeout: 15 * time.Second})
		waits = append(waits, wait)
	}
	rs.up["orders"].SetDelay(20 * time.Millisecond)
	poll(t, ctx, "the ceiling reached", func() bool { return up.Inflight() == 4 })
	time.Sleep(before) // into the load: the fault's moment, not a synchronisation
	// Cut the replica that renews the most leases: the running requests'
	// heartbeats reach it (each Envoy worker's stream goes to one replica).
	victim, renewed := -1, 0.0
	for i := range rs.replicas {
		n := rs.replicaMetrics(ctx, i).Sum("bulkhead_access_log_entries_total", map[string]string{"result": "renewed"})
		if n > renewed {
			victim, renewed = i, n
		}
	}
	if victim < 0 {
		t.Fatal("no replica renewed a lease: the requests' periodic entries reach none")
	}
	rs.point((victim + 1) % len(rs.replicas)) // the stack reads a replica that serves
	leaseAdmitted := func() float64 {
		return rs.replicaMetrics(ctx, victim).Sum("bulkhead_ledger_lease_admitted_total", nil)
	}
	var fromLease float64
	if leases {
		fromLease = -leaseAdmitted()
	}
	cutOff(rs, links, victim)
	time.Sleep(cut) // the fault's length
	if leases {
		fromLease += leaseAdmitted() // the victim runs: only its link is cut
	}
	heal(rs, links, victim)
	healed := time.Now()
	poll(t, ctx, "the cut-off replica strict again", func() bool {
		v, _ := rs.replicaMetrics(ctx, victim).Value("bulkhead_ledger_state", map[string]string{"state": "strict"})
		return v == 1
	})
	strictAfter := time.Since(healed)
	var all []testbed.Stats
	for _, w := range waits {
		all = append(all, w())
	}
	st := testbed.MergeStats(all...)
	moved := rs.replicaMetrics(ctx, victim).Sum("bulkhead_access_log_entries_total", map[string]string{"result": "ledger_unavailable"})
	var adopted float64
	for i := range rs.replicas {
		adopted += rs.replicaMetrics(ctx, i).Sum("bulkhead_permits_adopted_total", nil)
	}
	t.Logf("replica %d cut for %v (strict %v after healing): %s; upstream max %d, ceiling 4; "+
		"it renewed %v leases before the cut, refused %v entries while cut off; adoptions %v",
		victim, cut, strictAfter.Round(time.Millisecond), summary(st), up.Max(), renewed, moved, adopted)
	if leases {
		t.Logf("replica %d admitted %v Checks from its capacity lease while cut off", victim, fromLease)
	}
	if m := rs.up["orders"].Max(); m > 20 {
		t.Fatalf("OVER-ADMISSION: orders' upstream saw %d requests at once, limit 20", m)
	}
	if up.Max() > 4 {
		t.Fatalf("OVER-ADMISSION: upstream saw %d requests at once across a replica's cut, normal ceiling 4 (limit 5)", up.Max())
	}
	if st.OK() == 0 {
		t.Fatal("nothing admitted")
	}
}
