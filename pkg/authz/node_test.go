package authz

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// fakeNodes records the nodes Checks came from.
type fakeNodes struct {
	mu    sync.Mutex
	heard []string
}

func (f *fakeNodes) Heard(node string) {
	f.mu.Lock()
	f.heard = append(f.heard, node)
	f.mu.Unlock()
}

func (f *fakeNodes) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.heard...)
}

func TestCheckAttributesNode(t *testing.T) {
	tests := []struct {
		name   string
		md     metadata.MD // sent with the Check
		want   string      // Lease.Node
		heards bool        // the tracker hears of the node
		bad    int         // counted as an invalid node input
	}{
		{"no metadata", nil, "", false, 0},
		{"node id", metadata.Pairs(NodeHeader, "front-proxy"), "front-proxy", true, 0},
		{"header name in upper case", metadata.Pairs("X-Bulkhead-Node", "sidecar~10.0.0.7~pod.ns~ns.svc"), "sidecar~10.0.0.7~pod.ns~ns.svc", true, 0},
		{"given twice", metadata.Pairs(NodeHeader, "a", NodeHeader, "b"), "", false, 1},
		{"empty", metadata.Pairs(NodeHeader, ""), "", false, 1},
		{"space", metadata.Pairs(NodeHeader, "front proxy"), "", false, 1},
		{"too long", metadata.Pairs(NodeHeader, strings.Repeat("n", 257)), "", false, 1},
		{"far too long", metadata.Pairs(NodeHeader, strings.Repeat("n", 64<<10)), "", false, 1},
		{"at the length limit", metadata.Pairs(NodeHeader, strings.Repeat("n", 256)), strings.Repeat("n", 256), true, 0},
		{"other metadata only", metadata.Pairs("x-other", "front-proxy"), "", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := &fakeNodes{}
			e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 0, 0)},
				policy: DefaultPolicy(), opts: []Option{WithNodes(nodes)}})
			ctx := context.Background()
			if tt.md != nil {
				ctx = metadata.NewOutgoingContext(ctx, tt.md)
			}
			resp, err := e.client.Check(ctx, forKey("catalog"))
			lease, res := e.ledger.Release(wantAdmitted(t, resp, err, "catalog"), permit.AccessLog)
			if res != permit.Released || lease.Node != tt.want {
				t.Fatalf("lease node = %q (%v), want %q", lease.Node, res, tt.want)
			}
			want := []string{}
			if tt.heards {
				want = []string{tt.want}
			}
			if heard := nodes.got(); strings.Join(heard, ",") != strings.Join(want, ",") || len(heard) != len(want) {
				t.Fatalf("tracker heard %q, want %q", heard, want)
			}
			if got := e.rec.count(e.rec.inputs, string(InputNode)); got != tt.bad {
				t.Errorf("InvalidInput(node) recorded %d times, want %d", got, tt.bad)
			}
		})
	}
}

// TestCheckNodeOnDenial: a Check that is denied still tells the tracker that
// its node is alive.
func TestCheckNodeOnDenial(t *testing.T) {
	nodes := &fakeNodes{}
	e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 0, 0)},
		policy: DefaultPolicy(), opts: []Option{WithNodes(nodes)}})
	hold(t, e.reg, "catalog", 1)
	ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(NodeHeader, "n1"))
	resp, err := e.client.Check(ctx, forKey("catalog"))
	wantDenial(t, resp, err, 503, "queue_full", "catalog")
	if got := nodes.got(); len(got) != 1 || got[0] != "n1" {
		t.Fatalf("heard %v, want [n1]", got)
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
