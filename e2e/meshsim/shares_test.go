package meshsim

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	loadstats "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
)

// sharesWatch checks the RTDS and LRS requests the simulator sends as a
// real Envoy 1.40 sends them: the node in the first RTDS request only, in
// every LRS request whole (its extensions), and every RTDS request after
// the first an answer naming a nonce.
type sharesWatch struct {
	mu       sync.Mutex
	rtds     int // requests
	acks     int
	lrs      int
	problems []string
}

func (w *sharesWatch) interceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &watchedStream{ServerStream: ss, w: w})
}

type watchedStream struct {
	grpc.ServerStream
	w *sharesWatch
	n int
}

func (s *watchedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	s.n++
	switch m := m.(type) {
	case *discovery.DiscoveryRequest:
		w.rtds++
		switch {
		case s.n == 1 && (m.GetNode().GetId() == "" || len(m.GetNode().GetExtensions()) == 0 || m.GetResponseNonce() != ""):
			w.problems = append(w.problems, "the first RTDS request without the whole node, or with a nonce")
		case s.n > 1 && (m.GetNode() != nil || m.GetResponseNonce() == "" || m.GetVersionInfo() == ""):
			w.problems = append(w.problems, "an RTDS answer with a node, or without a nonce or version")
		case s.n > 1:
			w.acks++
		}
		if m.GetTypeUrl() != shares.RuntimeType || len(m.GetResourceNames()) != 1 || m.GetResourceNames()[0] != shares.DefaultLayer {
			w.problems = append(w.problems, "an RTDS request for another type or layer")
		}
	case *loadstats.LoadStatsRequest:
		w.lrs++
		if size := proto.Size(m.GetNode()); m.GetNode().GetId() == "" || size < 50000 {
			w.problems = append(w.problems, "an LRS request without the whole node")
		}
		for _, cs := range m.GetClusterStats() {
			if !strings.HasSuffix(cs.GetClusterName(), "_shares") || len(cs.GetUpstreamLocalityStats()) != 1 {
				w.problems = append(w.problems, "a load report of another cluster, or without its locality")
			}
		}
	}
	return nil
}

// TestMeshSharesAgainstManager runs a mesh configured for shares against
// package shares' own RTDS and LRS services: the requests of the bulkhead
// in mode shares pass its share (no Check), under the limit; those of the
// strict one are Checked.
func TestMeshSharesAgainstManager(t *testing.T) {
	d := &fakeDaemon{t: t, limit: map[string]int{}, held: map[string]string{}, ended: map[string]bool{}, inUse: map[string]int{},
		streams: map[string]int{}, nodes: map[string]bool{}}
	reg := bulkhead.NewRegistry()
	if _, err := reg.Apply(map[string]bulkhead.Settings{"shared": {MaxConcurrent: 40}}); err != nil {
		t.Fatal(err)
	}
	mgr := shares.New(shares.Settings{TTL: 600 * time.Millisecond, MaxRequest: time.Second, Interval: 150 * time.Millisecond}, reg, nil, nil)
	mgr.Apply(map[string]shares.Policy{"shared": {Mode: shares.Shares, Cluster: shares.DefaultCluster("shared")}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	watch := &sharesWatch{}
	gs := grpc.NewServer(grpc.StreamInterceptor(watch.interceptor))
	authv3.RegisterAuthorizationServer(gs, d)
	alsv3.RegisterAccessLogServiceServer(gs, d)
	shares.Register(gs, mgr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mctx, stopMgr := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(ln) })
	wg.Go(func() { _ = mgr.Run(mctx) })
	defer wg.Wait()
	defer stopMgr()
	defer gs.Stop()

	const envoys = 3
	m, err := New(Config{Targets: []string{ln.Addr().String()}, Envoys: envoys, Shares: true,
		Routes:    []Route{{Bulkhead: "shared", Limit: 40}, {Bulkhead: "strict"}},
		Heartbeat: 200 * time.Millisecond, Ping: -1, Durations: []DurationShare{{10 * time.Millisecond, 1}, {300 * time.Millisecond, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Connections() != envoys*3 {
		t.Errorf("connections %d: want %d (2 workers and a main thread per Envoy)", m.Connections(), envoys*3)
	}
	if err := m.Connect(ctx, 4); err != nil {
		t.Fatal(err)
	}
	m.RunShares(ctx)
	if err := m.WaitShares(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // the shares grow with the first rounds
	m.Run(ctx, ctx, 200, time.Second)
	time.Sleep(300 * time.Millisecond) // the heartbeat log's last batch
	m.Close()

	d.mu.Lock()
	defer d.mu.Unlock()
	watch.mu.Lock()
	defer watch.mu.Unlock()
	for _, p := range append(d.problems, watch.problems...) {
		t.Error(p)
	}
	st := m.Stats
	if st.SharesAdmitted.Load() == 0 || st.ChecksOK.Load() == 0 || d.inUse["shared"] != 0 {
		t.Errorf("admitted by a share %d, Checks admitted %d, Checks of the shared bulkhead %d: want some, some, none",
			st.SharesAdmitted.Load(), st.ChecksOK.Load(), d.inUse["shared"])
	}
	if watch.acks < envoys || st.RTDSResponses.Load() < int64(watch.acks) || watch.lrs < 3*envoys || st.LRSReports.Load() == 0 {
		t.Errorf("RTDS ACKs %d, responses %d, LRS requests %d, reports %d: want an ACK per response, several reports per Envoy",
			watch.acks, st.RTDSResponses.Load(), watch.lrs, st.LRSReports.Load())
	}
	if r := m.Caps.Report(); r.Violations != 0 {
		t.Errorf("caps %+v: the shares went past the limit", r)
	}
	if n := st.SharesStreamErrors.Load(); n != 0 {
		t.Errorf("%d RTDS or LRS streams failed", n)
	}
}
