package replication

import (
	"sync"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisledger"
)

// Gate keeps the data plane away from a replica that cannot reach the
// shared ledger. The periodic access-log entries of running requests are
// the only evidence that they still run: kept by a replica that cannot
// renew their leases in Redis, the leases run out while the requests run
// and the other replicas admit past the limit (seen: 8 in flight on a
// limit of 5, with the default fail_closed). So, whatever
// ledger.on_unavailable says:
//
//   - while the ledger is not strict, the gRPC health check answers
//     NOT_SERVING: Envoy's active health check takes the replica out of
//     the rotation within an interval, and its Checks and new access-log
//     streams go to the other replicas;
//   - when the ledger becomes unavailable, every access-log stream is
//     closed (sever), so that Envoy's next entries open new streams, to a
//     replica that renews (or adopts) them within the lease; a stream that
//     later brings an entry only the shared ledger could serve is closed
//     too (the ledger answers its entries permit.Unavailable).
//
// It is the ledger's recorder: the ledger reports each change of state to
// it, and it passes every report on to the recorder it wraps (the
// metrics). Safe for concurrent use.
type Gate struct {
	redisledger.Recorder
	health *health.Server
	sever  func()

	mu      sync.Mutex
	serving bool // Serve was called: the health check follows the ledger
	strict  bool
}

var _ redisledger.Recorder = (*Gate)(nil)

// NewGate returns the gate of the data plane served with hs: sever ends
// every access-log stream running when it is called (the server owns the
// streams). The health check stays as it is until Serve.
func NewGate(rec redisledger.Recorder, hs *health.Server, sever func()) *Gate {
	return &Gate{Recorder: rec, health: hs, sever: sever}
}

// LedgerState implements redisledger.Recorder.
func (g *Gate) LedgerState(s admission.State) {
	g.Recorder.LedgerState(s)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.strict = s == admission.Strict
	if s == admission.Unavailable {
		g.sever()
	}
	g.publish()
}

// Serve makes the health check follow the ledger from now on: SERVING
// while it is strict, NOT_SERVING otherwise.
func (g *Gate) Serve() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.serving = true
	g.publish()
}

func (g *Gate) publish() {
	if !g.serving {
		return
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if g.strict {
		st = healthpb.HealthCheckResponse_SERVING
	}
	g.health.SetServingStatus("", st)
}
