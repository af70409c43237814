package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// localShareYAML is one bulkhead, auth, on Redis at addr with local_share;
// leases and bulkhead are the YAML of leases: and of auth.
func localShareYAML(addr, leases, auth string) string {
	return fmt.Sprintf(`
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
leases: %s
ledger: {backend: redis, on_unavailable: local_share, redis: {address: %q, timeout: 200ms}}
bulkheads:
  auth: %s
`, leases, addr, auth)
}

// admitAlone kills Redis and waits until rn admits its share alone.
func admitAlone(t *testing.T, rn *running, srv *testkit.Redis) {
	t.Helper()
	waitStrict(t, rn)
	testkit.Eventually(t, "share sized", func() bool { return rn.r.replica.Fallback.Share("auth") != nil })
	srv.Kill()
	testkit.Eventually(t, "local share allowed", rn.r.replica.Ledger.LocalShareOK)
}

// The hand-over leaves no permit outside Redis's count (fault issue,
// finding 3): a Check waiting in the local share's queue when Redis answers
// again is not given the slot a handed-over permit frees, which it would
// hold, never handed over, outside the count. Limit 2: 2 in flight after it,
// not 3.
func TestHandoverLeavesNoPermitBehind(t *testing.T) {
	srv := testkit.StartRedis(t)
	// Long leases (no heartbeats): none ends while the test runs.
	rn := start(t, parseConfig(t, localShareYAML(srv.Addr, "{default_ttl: 60s, sweep_interval: 50ms, heartbeat_interval: 0s}",
		"{max_concurrent: 2, max_queue: 1, max_wait: 20s}")))
	admitAlone(t, rn, srv)
	for range 2 {
		if tok, r := check(t, rn, "auth"); tok == "" || r != "" {
			t.Fatalf("local share: token %q, reason %q", tok, r)
		}
	}
	type result struct {
		resp *authv3.CheckResponse
		err  error
	}
	third := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := authv3.NewAuthorizationClient(rn.conn).Check(ctx, checkReq("auth"))
		third <- result{resp, err}
	}()
	testkit.Eventually(t, "a third Check waits in the local share", func() bool {
		return rn.r.replica.Fallback.Share("auth").Snapshot().Queued[1] == 1
	})
	srv.Start()
	waitStrict(t, rn)
	got := <-third
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.resp.GetDeniedResponse() == nil {
		t.Errorf("the waiting Check was admitted during the hand-over (token %q)",
			got.resp.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue())
	}
	if n := rn.r.Ledger.Len(); n != 0 {
		t.Errorf("%d permits left outside Redis after the hand-over", n)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	if n, _ := rdb.ZCard(context.Background(), "bulkhead:{auth}:p").Result(); n != 2 {
		t.Errorf("Redis counts %d permits, want the 2 handed over", n)
	}
}

// The hand-over keeps each permit's lease (fault issue, finding 4): a permit
// admitted alone with a long lease (heartbeats off) is handed to Redis with
// the time left on it, not the heartbeat TTL, so Redis does not reclaim it
// while its request runs.
func TestHandoverKeepsTheLease(t *testing.T) {
	srv := testkit.StartRedis(t)
	rn := start(t, parseConfig(t, localShareYAML(srv.Addr,
		"{default_ttl: 30s, sweep_interval: 50ms, heartbeat_interval: 0s}", "{max_concurrent: 2, max_queue: 0, lease_ttl: 40s}")))
	if rn.r.cfg.Leases.HeartbeatInterval != 0 {
		t.Fatal("heartbeats on")
	}
	admitAlone(t, rn, srv)
	for range 2 {
		if tok, r := check(t, rn, "auth"); tok == "" || r != "" {
			t.Fatalf("local share: token %q, reason %q", tok, r)
		}
	}
	srv.Start()
	waitStrict(t, rn)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	leases, err := rdb.ZRangeWithScores(ctx, "bulkhead:{auth}:p", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 2 {
		t.Fatalf("Redis holds %d leases, want the 2 handed over", len(leases))
	}
	for _, l := range leases {
		if left := time.Duration(int64(l.Score)-now.UnixMilli()) * time.Millisecond; left < 30*time.Second {
			t.Errorf("a permit of a 40 s lease handed over with %v left", left)
		}
	}
}
