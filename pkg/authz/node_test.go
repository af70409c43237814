package authz

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// silentNodes is a fixed set of nodes that send no periodic entries.
type silentNodes map[string]bool

func (s silentNodes) Silent(node string) bool { return s[node] }

func TestCheckAttributesNode(t *testing.T) {
	tests := []struct {
		name string
		md   metadata.MD // sent with the Check
		want string      // Lease.Node
		bad  int         // counted as an invalid node input
	}{
		{"no metadata", nil, "", 0},
		{"node id", metadata.Pairs(NodeHeader, "front-proxy"), "front-proxy", 0},
		{"header name in upper case", metadata.Pairs("X-Bulkhead-Node", "sidecar~10.0.0.7~pod.ns~ns.svc"), "sidecar~10.0.0.7~pod.ns~ns.svc", 0},
		{"given twice", metadata.Pairs(NodeHeader, "a", NodeHeader, "b"), "", 1},
		{"empty", metadata.Pairs(NodeHeader, ""), "", 1},
		{"space", metadata.Pairs(NodeHeader, "front proxy"), "", 1},
		{"too long", metadata.Pairs(NodeHeader, strings.Repeat("n", 257)), "", 1},
		{"far too long", metadata.Pairs(NodeHeader, strings.Repeat("n", 64<<10)), "", 1},
		{"at the length limit", metadata.Pairs(NodeHeader, strings.Repeat("n", 256)), strings.Repeat("n", 256), 0},
		{"other metadata only", metadata.Pairs("x-other", "front-proxy"), "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 0, 0)},
				policy: DefaultPolicy()})
			ctx := context.Background()
			if tt.md != nil {
				ctx = metadata.NewOutgoingContext(ctx, tt.md)
			}
			resp, err := e.client.Check(ctx, forKey("catalog"))
			lease, res := e.ledger.Release(wantAdmitted(t, resp, err, "catalog"), permit.AccessLog)
			if res != permit.Released || lease.Node != tt.want {
				t.Fatalf("lease node = %q (%v), want %q", lease.Node, res, tt.want)
			}
			if got := e.rec.count(e.rec.inputs, string(bulkhead.InputNode)); got != tt.bad {
				t.Errorf("InvalidInput(node) recorded %d times, want %d", got, tt.bad)
			}
		})
	}
}

// TestHeartbeatLease: with heartbeats on, every permit's lease is the
// heartbeat TTL, except for a node known not to send periodic entries,
// whose permits get the long lease (the route's, else the bulkhead's).
func TestHeartbeatLease(t *testing.T) {
	pol := DefaultPolicy()
	pol.HeartbeatTTL = 3 * time.Second
	pol.LeaseTTL = map[string]time.Duration{"catalog": 30 * time.Second}
	e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(10, 0, 0)},
		policy: pol, opts: []Option{WithSilentNodes(silentNodes{"old-envoy": true})}})
	for _, tt := range []struct {
		name, node string
		route      *string
		want       time.Duration
	}{
		{"no node", "", nil, 3 * time.Second},
		{"a heartbeating node", "envoy-1", nil, 3 * time.Second},
		{"its route lease is not used", "envoy-1", ptr("90s"), 3 * time.Second},
		{"a silent node", "old-envoy", nil, 30 * time.Second},
		{"a silent node on a route with a lease", "old-envoy", ptr("90s"), 90 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.node != "" {
				ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs(NodeHeader, tt.node))
			}
			ext := map[string]string{"bulkhead": "catalog"}
			if tt.route != nil {
				ext[ExtLeaseTTL] = *tt.route
			}
			resp, err := e.client.Check(ctx, checkReq(ext, nil))
			lease, _ := e.ledger.Release(wantAdmitted(t, resp, err, "catalog"), permit.AccessLog)
			if got := lease.Expires.Sub(lease.Acquired); got != tt.want {
				t.Errorf("lease TTL = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCheckRouteLeaseTTL(t *testing.T) {
	const bulkheadTTL = 30 * time.Second
	tests := []struct {
		name    string
		value   *string // context_extensions lease_ttl; nil = absent
		max     time.Duration
		want    time.Duration
		invalid int
	}{
		{"absent", nil, 10 * time.Minute, bulkheadTTL, 0},
		{"a duration", ptr("90s"), 10 * time.Minute, 90 * time.Second, 0},
		{"shorter than the bulkhead's", ptr("1.5s"), 10 * time.Minute, 1500 * time.Millisecond, 0},
		{"at the cap", ptr("10m"), 10 * time.Minute, 10 * time.Minute, 0},
		{"above the cap", ptr("1h"), 10 * time.Minute, 10 * time.Minute, 1},
		{"zero", ptr("0s"), 10 * time.Minute, bulkheadTTL, 1},
		{"negative", ptr("-5s"), 10 * time.Minute, bulkheadTTL, 1},
		{"no unit", ptr("90"), 10 * time.Minute, bulkheadTTL, 1},
		{"not a duration", ptr("soon"), 10 * time.Minute, bulkheadTTL, 1},
		{"empty", ptr(""), 10 * time.Minute, bulkheadTTL, 1},
		{"too long to parse", ptr(strings.Repeat("1", 40) + "s"), 10 * time.Minute, bulkheadTTL, 1},
		{"overflow", ptr("9999999999h"), 10 * time.Minute, bulkheadTTL, 1},
		{"route leases off", ptr("90s"), 0, bulkheadTTL, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := DefaultPolicy()
			pol.LeaseTTL = map[string]time.Duration{"catalog": bulkheadTTL}
			pol.MaxRouteLeaseTTL = tt.max
			e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 0, 0)}, policy: pol})
			ext := map[string]string{"bulkhead": "catalog"}
			if tt.value != nil {
				ext[ExtLeaseTTL] = *tt.value
			}
			resp, err := e.client.Check(context.Background(), checkReq(ext, nil))
			lease, _ := e.ledger.Release(wantAdmitted(t, resp, err, "catalog"), permit.AccessLog)
			if got := lease.Expires.Sub(lease.Acquired); got != tt.want {
				t.Errorf("lease TTL = %v, want %v", got, tt.want)
			}
			if got := e.rec.count(e.rec.badTTL, "catalog"); got != tt.invalid {
				t.Errorf("InvalidLeaseTTL recorded %d times, want %d", got, tt.invalid)
			}
		})
	}
}
