package replication

import (
	"testing"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
)

// states is a redisledger.Recorder that keeps the states reported.
type states struct{ got []admission.State }

func (s *states) LedgerCall(admission.Op, time.Duration, error) {}
func (s *states) LedgerState(st admission.State)                { s.got = append(s.got, st) }
func (s *states) LedgerReplicas(int)                            {}
func (s *states) LedgerGlobal(string, admission.Global)         {}

// The health check follows the ledger once the gate serves (SERVING only
// while strict), the streams are severed each time the ledger becomes
// unavailable and at no other change, and the recorder hears every report.
func TestGate(t *testing.T) {
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING) // as the runner does until it serves
	rec := &states{}
	severed := 0
	g := NewGate(rec, hs, func() { severed++ })
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := hs.Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	g.LedgerState(admission.Strict)
	if s := status(); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health %v before Serve, want it left NOT_SERVING", s)
	}
	g.Serve()
	serving, not := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	for i, step := range []struct {
		state   admission.State
		health  healthpb.HealthCheckResponse_ServingStatus
		severed int
	}{
		{admission.Unavailable, not, 1},
		{admission.Strict, serving, 1},
		{admission.Unavailable, not, 2},
		{admission.Strict, serving, 2},
	} {
		g.LedgerState(step.state)
		if s := status(); s != step.health || severed != step.severed {
			t.Fatalf("step %d (%v): health %v, severed %d times; want %v, %d", i, step.state, s, severed, step.health, step.severed)
		}
	}
	if len(rec.got) != 5 {
		t.Errorf("recorder heard %v, want all 5 reports", rec.got)
	}
}
