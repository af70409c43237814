package meshsim

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	loadstats "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	runtimesvc "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
)

// agent is the main thread of one simulated Envoy configured for shares
// (envoy/front-proxy.yaml.tmpl with shares): on a connection of its own to
// the daemon (Envoy's main thread has its own connection pool to the
// bulkhead cluster) it keeps an RTDS stream for the runtime layer named
// Config.Layer and an LRS stream, and it runs the share clusters' circuit
// breakers, which every worker of the Envoy shares.
//
// As Envoy 1.40 does (measured; set_node_on_first_message_only), the RTDS
// stream names the node in its first request only and ACKs each response
// with its version and nonce at once, while every LRS request carries the
// whole node (about 61 KB). A layer whose TTL runs out is dropped: the
// static layer routes every request through ext_authz again. Safe for
// concurrent use.
type agent struct {
	node  string
	conn  *grpc.ClientConn
	ident *corev3.Node // the whole node (the captured one, this id)
	layer string
	stats *Stats

	mu       sync.Mutex
	values   map[string]float64 // the applied layer's keys
	layerEnd time.Time          // its TTL runs out (zero: no layer)
	version  string             // its version, for a reconnect's first request
	inflight map[string]int     // by share cluster: requests running
	issued   map[string]uint64  // by share cluster, since the last report
	done     map[string]uint64
	dropped  map[string]uint64 // circuit breaker overflows
	asked    []string          // the clusters the daemon asks reports of
	interval time.Duration     // its load reporting interval (0: none yet)
	askedC   chan struct{}     // a new LRS answer (capacity 1)
	gotLayer chan struct{}     // closed at the first layer
	gotOnce  sync.Once

	idx     int                 // the Envoy's index in the mesh
	busy    func(time.Time) int // the busy Envoy's index at a time (Config.Skew)
	samples []ShareSample       // one per load report, until TakeShareSamples
}

// ShareSample is what one Envoy ran with when it sent a load report: its
// share of the bulkhead (-1: strict), the requests it had in flight under
// it, and whether it was the busy Envoy (Config.Skew).
type ShareSample struct {
	Envoy    int  `json:"envoy"`
	Share    int  `json:"share"`
	InFlight int  `json:"in_flight"`
	Busy     bool `json:"busy"`
}

func newAgent(node string, conn *grpc.ClientConn, ident *corev3.Node, layer string, stats *Stats) *agent {
	return &agent{node: node, conn: conn, ident: ident, layer: layer, stats: stats,
		inflight: map[string]int{}, issued: map[string]uint64{}, done: map[string]uint64{}, dropped: map[string]uint64{},
		askedC: make(chan struct{}, 1), gotLayer: make(chan struct{})}
}

// shareCluster is the share cluster of bulkhead b in the simulated
// Envoys' configuration (the daemon's default).
func shareCluster(b string) string { return shares.DefaultCluster(b) }

// route picks the route of a request of bulkhead b at now, as Envoy's
// route pair does: the strict route (through ext_authz) matches with the
// runtime fraction bulkhead.strict.<b> percent (100 without a layer), the
// share route otherwise. On the share route it applies the cluster's
// circuit breaker: admitted (counted in flight until a.end) or overflowed.
func (a *agent) route(b string, now time.Time) (share, admitted bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	live := !a.layerEnd.IsZero() && now.Before(a.layerEnd)
	strict, ok := a.values[shares.StrictKey(b)]
	if !live || !ok {
		strict = 100
	}
	if strict >= 100 || strict > 0 && rand.Float64()*100 < strict {
		return false, false
	}
	c := shareCluster(b)
	limit := 0.0 // the static circuit breaker's max_requests
	if v, ok := a.values[shares.ShareKey(c)]; live && ok {
		limit = v
	}
	if float64(a.inflight[c]) >= limit {
		a.dropped[c]++
		return true, false
	}
	a.inflight[c]++
	a.issued[c]++
	return true, true
}

// end ends a request admitted on b's share route.
func (a *agent) end(b string) {
	c := shareCluster(b)
	a.mu.Lock()
	a.inflight[c]--
	a.done[c]++
	a.mu.Unlock()
}

// run keeps the agent's two streams open until ctx ends, opening each
// again a second after it fails (Envoy's xDS retry backoff starts near
// there).
func (a *agent) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, stream := range []func(context.Context) error{a.rtds, a.lrs} {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := stream(ctx); err != nil && ctx.Err() == nil {
					a.stats.SharesStreamErrors.Add(1)
				}
				_ = sleep(ctx, time.Second)
			}
		})
	}
}

// rtds is one RTDS stream: the first request with the node and the layer
// the Envoy runs with, then an ACK for every response.
func (a *agent) rtds(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := runtimesvc.NewRuntimeDiscoveryServiceClient(a.conn).StreamRuntime(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	a.mu.Lock()
	version := a.version
	a.mu.Unlock()
	req := &discovery.DiscoveryRequest{VersionInfo: version, Node: a.ident, ResourceNames: []string{a.layer}, TypeUrl: shares.RuntimeType}
	for {
		if err := stream.Send(req); err != nil {
			return err
		}
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		a.stats.RTDSResponses.Add(1)
		req = &discovery.DiscoveryRequest{ResourceNames: []string{a.layer}, TypeUrl: shares.RuntimeType, ResponseNonce: resp.GetNonce()}
		if err := a.apply(resp, time.Now()); err != nil {
			req.VersionInfo = version
			req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
			continue
		}
		version = resp.GetVersionInfo()
		req.VersionInfo = version
	}
}

// apply takes a response's layer: its keys and its TTL from now.
func (a *agent) apply(resp *discovery.DiscoveryResponse, now time.Time) error {
	var layer *runtimesvc.Runtime
	var ttl time.Duration
	for _, r := range resp.GetResources() {
		var res discovery.Resource
		if err := r.UnmarshalTo(&res); err != nil {
			return err
		}
		if res.GetName() != a.layer {
			continue
		}
		ttl = res.GetTtl().AsDuration()
		if res.GetResource() == nil {
			continue // a heartbeat: Envoy 1.40 does not renew the TTL with it
		}
		layer = &runtimesvc.Runtime{}
		if err := res.GetResource().UnmarshalTo(layer); err != nil {
			return err
		}
	}
	if layer == nil {
		return nil
	}
	values := map[string]float64{}
	for k, v := range layer.GetLayer().GetFields() {
		values[k] = v.GetNumberValue()
	}
	a.mu.Lock()
	a.values, a.version = values, resp.GetVersionInfo()
	a.layerEnd = time.Time{}
	if ttl > 0 {
		a.layerEnd = now.Add(ttl)
	} else {
		a.layerEnd = now.Add(100 * 365 * 24 * time.Hour)
	}
	a.mu.Unlock()
	a.gotOnce.Do(func() { close(a.gotLayer) })
	return nil
}

// lrs is one LRS stream: a first request, then a report of the asked
// clusters every interval the daemon asks for, each with the whole node.
func (a *agent) lrs(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := loadstats.NewLoadReportingServiceClient(a.conn).StreamLoadStats(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	if err := stream.Send(&loadstats.LoadStatsRequest{Node: a.ident}); err != nil {
		return err
	}
	recvErr := make(chan error, 1)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			a.mu.Lock()
			a.asked = slices.Clone(resp.GetClusters())
			a.interval = resp.GetLoadReportingInterval().AsDuration()
			a.mu.Unlock()
			select {
			case a.askedC <- struct{}{}:
			default:
			}
		}
	}()
	var tick <-chan time.Time
	var ticker *time.Ticker
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-recvErr:
			return err
		case <-a.askedC:
			// Envoy starts its report timer afresh with each answer.
			a.mu.Lock()
			interval := a.interval
			a.mu.Unlock()
			if ticker != nil {
				ticker.Stop()
				ticker, tick = nil, nil
			}
			if interval > 0 {
				ticker = time.NewTicker(interval)
				tick = ticker.C
			}
		case now := <-tick:
			if err := stream.Send(a.report(now, now.Sub(last))); err != nil {
				return err
			}
			last = now
			a.stats.LRSReports.Add(1)
		}
	}
}

// report is a load report of the asked clusters over the last interval:
// the requests in flight now, and those issued, ended and dropped since
// the last report. The simulated Envoys have no critical share route:
// they leave its clusters out, as Envoy leaves out a cluster it does not
// have.
func (a *agent) report(now time.Time, interval time.Duration) *loadstats.LoadStatsRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sampleLocked(now)
	req := &loadstats.LoadStatsRequest{Node: a.ident}
	critical := map[string]bool{}
	for _, c := range a.asked {
		critical[shares.CriticalCluster(c)] = true
	}
	for _, c := range a.asked {
		if critical[c] {
			continue
		}
		req.ClusterStats = append(req.ClusterStats, &endpointv3.ClusterStats{
			ClusterName: c,
			UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{
				Locality:                a.ident.GetLocality(),
				TotalRequestsInProgress: uint64(max(0, a.inflight[c])),
				TotalIssuedRequests:     a.issued[c],
				TotalSuccessfulRequests: a.done[c],
				TotalErrorRequests:      a.dropped[c],
			}},
			TotalDroppedRequests: a.dropped[c],
			LoadReportInterval:   durationpb.New(interval),
		})
		a.issued[c], a.done[c], a.dropped[c] = 0, 0, 0
	}
	return req
}

// sampleLocked records what the agent runs with at now (ShareSample).
func (a *agent) sampleLocked(now time.Time) {
	for _, c := range a.asked {
		b, ok := strings.CutSuffix(c, "_shares")
		if !ok {
			continue
		}
		s := ShareSample{Envoy: a.idx, Share: -1, InFlight: max(0, a.inflight[c]), Busy: a.busy != nil && a.busy(now) == a.idx}
		live := !a.layerEnd.IsZero() && now.Before(a.layerEnd)
		if v, ok := a.values[shares.StrictKey(b)]; live && ok && v < 100 {
			s.Share = int(a.values[shares.ShareKey(c)])
		}
		a.samples = append(a.samples, s)
	}
}

// TakeShareSamples returns every agent's samples since the last call
// (ShareSample), and forgets them.
func (m *Mesh) TakeShareSamples() []ShareSample {
	var out []ShareSample
	for _, a := range m.agents {
		a.mu.Lock()
		out = append(out, a.samples...)
		a.samples = nil
		a.mu.Unlock()
	}
	return out
}

// WaitShares waits until every agent applied a layer, or ctx ends.
func (m *Mesh) WaitShares(ctx context.Context) error {
	for _, a := range m.agents {
		select {
		case <-ctx.Done():
			return errors.Join(errNoLayer, ctx.Err())
		case <-a.gotLayer:
		}
	}
	return nil
}

var errNoLayer = errors.New("meshsim: an Envoy has no runtime layer")

// RunShares opens every agent's RTDS and LRS streams, which live until ctx
// ends or Close. Once only.
func (m *Mesh) RunShares(ctx context.Context) {
	ctx, m.stopShares = context.WithCancel(ctx)
	for _, a := range m.agents {
		m.sharesWG.Go(func() { a.run(ctx) })
	}
}

// doShare runs request r of Envoy a on its share route, if the route
// takes it there: no Check and no access-log entry, the circuit breaker
// only. It reports whether the request took the share route, and whether
// the circuit breaker admitted it.
func (m *Mesh) doShare(ctx context.Context, a *agent, r *request) (share, admitted bool) {
	r.start = time.Now()
	if share, admitted = a.route(r.bulkhead, r.start); !share {
		return false, false
	}
	busy := m.busy(r.start) == a.idx
	if !admitted {
		m.Stats.SharesOverflow.Add(1) // Envoy's 503, x-envoy-overloaded
		if busy {
			m.Stats.BusyOverflow.Add(1)
		}
		return true, false
	}
	m.Stats.SharesAdmitted.Add(1)
	if busy {
		m.Stats.BusyAdmitted.Add(1)
	}
	m.Caps.enter(r.bulkhead)
	t := time.NewTimer(r.duration)
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()
	m.Caps.leave(r.bulkhead)
	a.end(r.bulkhead)
	return true, true
}
