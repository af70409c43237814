package meshsim

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// DefaultHealthCheck and DefaultHealthTimeout are the shipped configs'
// active health check of the daemon replicas (interval and
// no_traffic_interval 1 s, timeout 0.5 s, grpc_health_check with no
// service name): the template's bulkhead cluster with BulkheadReplicas,
// the chart's snippet with the Redis ledger, deploy/compose.
const (
	DefaultHealthCheck   = time.Second
	DefaultHealthTimeout = 500 * time.Millisecond
)

// healthConn is one Envoy's health-check connection to one daemon
// replica. Envoy's active health checker runs on its main thread and keeps
// a connection of its own to each host of the cluster (reuse_connection,
// its default), apart from the workers' connection pools, opened when the
// cluster is (before any request) and pinged by the cluster's
// connection_keepalive like the others (seen with Envoy 1.40: one
// connection per replica, one Health/Check and one PING each second; see
// docs/performance.md, "Health checks").
type healthConn struct {
	node    string
	conn    *grpc.ClientConn
	client  healthpb.HealthClient
	pending atomic.Bool // a Check is outstanding
}

// runHealth sends a Health/Check on every health-check connection once per
// interval, spread over the interval in slices, until ctx ends; it returns
// once the Checks it sent have ended. As Envoy's checker, it sends none on
// a connection whose last Check is still outstanding (Envoy arms the next
// interval at the answer or the timeout), and counts a Check that failed,
// timed out or answered other than SERVING as a failure.
func (m *Mesh) runHealth(ctx context.Context, interval, timeout time.Duration) {
	const slices = 20
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(max(interval/slices, time.Millisecond))
	defer tick.Stop()
	for slice := 0; ; slice = (slice + 1) % slices {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for i := slice; i < len(m.health); i += slices {
			h := m.health[i]
			if !h.pending.CompareAndSwap(false, true) {
				continue
			}
			wg.Go(func() {
				defer h.pending.Store(false)
				cctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				resp, err := h.client.Check(cctx, &healthpb.HealthCheckRequest{})
				switch {
				case ctx.Err() != nil:
				case err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
					m.Stats.HealthFailed.Add(1)
				default:
					m.Stats.HealthOK.Add(1)
				}
			})
		}
	}
}
