//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// A connection bulkhead on the shared ledger (Redis) behind two replicas
// (Envoy's bulkhead cluster lists both): the limit holds at the upstream,
// waiting connections proceed as others close, and each connection's end
// entry releases its permit in Redis, by (bulkhead, token), whichever
// replica hears it.
func TestConnectionSharedLedger(t *testing.T) {
	srv := testkit.StartRedis(t)
	echo := newEcho(t)
	port := endpoint(t, freePort(t)).Port
	rs := startReplicaStack(t, replicaSpec{
		ledger: redisLedger(srv.Addr),
		yaml: fmt.Sprintf(`bulkheads:
  catalog: {max_concurrent: 5}
  pg: {max_concurrent: 2, max_queue: 4, max_wait: 2500ms, connections: {ports: [%d]}}
`, port),
		replicas: 2, envoys: 1, rdb: newRedisClient(t, srv.Addr),
		envoy: func(p *envoy.Params) {
			p.ExtAuthzTimeout = 3 * time.Second
			p.TCPListeners = []envoy.TCPListener{{Name: "pg", Port: port, Upstream: endpoint(t, echo.Addr())}}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var cls []*tcpClient
	for range 4 {
		cls = append(cls, dialThrough(t, port))
	}
	admitted, waiting := waitAdmitted(t, ctx, cls, 2)
	if err := echo.WaitOpen(ctx, 2); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "Redis counting the two connections", func() bool { return rs.inUse(ctx, "pg") == 2 })
	for _, c := range waiting {
		if done, err := c.wait(0); done {
			t.Fatalf("a third connection went through (%v) while two held the permits", err)
		}
	}
	for _, c := range admitted {
		c.c.Close()
	}
	last, _ := waitAdmitted(t, ctx, waiting, 2)
	for _, c := range last {
		c.c.Close()
	}
	poll(t, ctx, "every permit released in Redis", func() bool { return rs.inUse(ctx, "pg") == 0 })
	if echo.Max() != 2 || echo.Accepted() != 4 {
		t.Fatalf("upstream: %d accepted, at most %d open; want 4, 2", echo.Accepted(), echo.Max())
	}
}
