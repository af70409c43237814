package authz

import (
	"context"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

func connectionPolicy() Policy {
	pol := DefaultPolicy()
	pol.Connections = map[uint32]Connection{5432: {Bulkhead: "pg", Priority: bulkhead.BestEffort}}
	return pol
}

func TestCheckConnection(t *testing.T) {
	tests := []struct {
		name   string
		port   uint32
		labels map[string]string
		want   bulkhead.Priority
		bad    int // InvalidPriority counted
	}{
		{"the port's class", 5432, nil, bulkhead.BestEffort, 0},
		{"the node's label", 5432, map[string]string{permit.LabelPriority: "critical", "team": "db"}, bulkhead.Critical, 0},
		{"an invalid label", 5432, map[string]string{permit.LabelPriority: "urgent"}, bulkhead.BestEffort, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"pg": settings(2, 0, 0)}, policy: connectionPolicy()})
			resp, err := e.client.Check(context.Background(), networkCheck("10.0.0.7", tt.port, tt.labels))
			token := wantAdmitted(t, resp, err, "pg")
			lease, res := e.ledger.Release(token, permit.AccessLog)
			if res != permit.Released || lease.Bulkhead != "pg" || lease.Priority != tt.want {
				t.Fatalf("Release = %+v, %v; want pg/%v", lease, res, tt.want)
			}
			if got := e.rec.count(e.rec.invalid, "pg"); got != tt.bad {
				t.Fatalf("invalid priorities = %d, want %d", got, tt.bad)
			}
		})
	}
}

func TestCheckConnectionRejectedAndUnmatched(t *testing.T) {
	e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"pg": settings(1, 0, 0)}, policy: connectionPolicy()})
	hold(t, e.reg, "pg", 1)
	resp, err := e.client.Check(context.Background(), networkCheck("10.0.0.7", 5432, nil))
	wantDenial(t, resp, err, 503, "queue_full", "pg")
	// A port no bulkhead claims is unmatched (deny by default).
	resp, err = e.client.Check(context.Background(), networkCheck("10.0.0.7", 6379, nil))
	wantDenial(t, resp, err, 503, "unknown_bulkhead", "")
	// An HTTP Check is never named by its port.
	req := forKey("")
	req.Attributes.Destination = networkCheck("10.0.0.7", 5432, nil).Attributes.Destination
	resp, err = e.client.Check(context.Background(), req)
	wantDenial(t, resp, err, 503, "unknown_bulkhead", "")
}
