package shares

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	loadstats "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	runtimesvc "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

func TestVersionRoundTrip(t *testing.T) {
	m := New(testSettings(), nil, clock.NewFake(t0), nil)
	v := m.version(layer{seq: 7, limits: map[string]int{"orders": 12, "catalog": -1, criticalUnit("orders"): 3}})
	boot, seq, limits, ok := parseVersion(v)
	if !ok || boot != m.boot || seq != 7 || limits["orders"] != 12 || limits["catalog"] != -1 || limits[criticalUnit("orders")] != 3 || len(limits) != 3 {
		t.Fatalf("parseVersion(%q) = %q %d %v %v", v, boot, seq, limits, ok)
	}
	for _, bad := range []string{"", "v1", "x.1;orders", "x.1;orders=a", ".1;", "x;a=1", "x.y;a=1"} {
		if _, _, _, ok := parseVersion(bad); ok {
			t.Errorf("parseVersion(%q) accepted", bad)
		}
	}
}

// dial serves m's RTDS and LRS on a bufconn and returns their clients.
func dial(t *testing.T, m *Manager) (runtimesvc.RuntimeDiscoveryServiceClient, loadstats.LoadReportingServiceClient) {
	t.Helper()
	ln := bufconn.Listen(1 << 20)
	s := grpc.NewServer()
	Register(s, m)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient("passthrough:///bufnet", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return ln.DialContext(ctx)
	}), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return runtimesvc.NewRuntimeDiscoveryServiceClient(cc), loadstats.NewLoadReportingServiceClient(cc)
}

// TestStreamsRefuseBadInput: a stream whose first request names no valid
// node, or asks for another type, is refused with a message that says so;
// the server keeps serving the next one.
func TestStreamsRefuseBadInput(t *testing.T) {
	clk := clock.NewFake(t0)
	m, _ := newTestManager(t, 10, clk)
	rtds, lrs := dial(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		req  *discovery.DiscoveryRequest
		want string
	}{
		{&discovery.DiscoveryRequest{}, "valid node id"},
		{&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "bad node\n"}}, "valid node id"},
		{&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "a"}, TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"}, "want " + RuntimeType},
	} {
		s, err := rtds.StreamRuntime(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(tc.req); err != nil {
			t.Fatal(err)
		}
		_, err = s.Recv()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("request %v: %v, want InvalidArgument saying %q", tc.req, err, tc.want)
		}
	}
	ls, err := lrs.StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Send(&loadstats.LoadStatsRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("LRS without a node: %v, want InvalidArgument", err)
	}

	// A good stream still gets its layer, and its ACK is recorded.
	s, err := rtds.StreamRuntime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-a"}, TypeUrl: RuntimeType, ResourceNames: []string{DefaultLayer}}); err != nil {
		t.Fatal(err)
	}
	m.Round()
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var res discovery.Resource
	if err := resp.GetResources()[0].UnmarshalTo(&res); err != nil || res.GetTtl().AsDuration() != testSettings().TTL || res.GetResource() == nil {
		t.Fatalf("response resource %v (%v): want the layer with a TTL of %v", &res, err, testSettings().TTL)
	}
	if err := s.Send(&discovery.DiscoveryRequest{VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), TypeUrl: RuntimeType}); err != nil {
		t.Fatal(err)
	}
	poll := time.Now()
	for {
		m.mu.Lock()
		acked := len(m.nodes["envoy-a"].sent) > 0 && m.nodes["envoy-a"].sent[0].acked
		m.mu.Unlock()
		if acked {
			break
		}
		if time.Since(poll) > 5*time.Second {
			t.Fatal("the ACK was not recorded")
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}

func TestTurnedAway(t *testing.T) {
	for _, tc := range []struct {
		inflight, issued, dropped uint64
		want                      int
	}{
		{5, 50, 0, 0},
		{5, 50, 70, 7}, // a share of 5 at 120/s of 100 ms requests: 12 wanted
		{5, 0, 3, 5},
		{0, 0, 3, 1},
		{1, 3, 1, 1},
	} {
		if got := turnedAway(tc.inflight, tc.issued, tc.dropped); got != tc.want {
			t.Errorf("turnedAway(%d in flight, %d issued, %d dropped) = %d, want %d", tc.inflight, tc.issued, tc.dropped, got, tc.want)
		}
	}
}
