package shares

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	loadstats "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	runtimesvc "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// RuntimeType is the type URL of an RTDS resource.
const RuntimeType = "type.googleapis.com/envoy.service.runtime.v3.Runtime"

// Register serves m's RTDS and LRS services on s.
func Register(s *grpc.Server, m *Manager) {
	runtimesvc.RegisterRuntimeDiscoveryServiceServer(s, rtds{m: m})
	loadstats.RegisterLoadReportingServiceServer(s, lrs{m: m})
}

type rtds struct {
	runtimesvc.UnimplementedRuntimeDiscoveryServiceServer
	m *Manager
}

// StreamRuntime serves one Envoy's runtime layer: when its shares change,
// and again every TTL/3 to renew the layer's TTL.
func (r rtds) StreamRuntime(stream runtimesvc.RuntimeDiscoveryService_StreamRuntimeServer) error {
	m := r.m
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	id := req.GetNode().GetId()
	if err := checkNode("RTDS", id); err != nil {
		return err
	}
	if t := req.GetTypeUrl(); t != "" && t != RuntimeType {
		return status.Errorf(codes.InvalidArgument, "RTDS: type %q (want %s)", t, RuntimeType)
	}
	if names := req.GetResourceNames(); len(names) > 0 && !slices.Contains(names, m.set.Layer) {
		m.log.Warn("an Envoy asks for runtime layers Bulkhead does not serve: its rtds_layer name must be "+m.set.Layer,
			"node", id, "asked", names)
	}
	n := m.connect(id, req.GetVersionInfo())
	if n == nil {
		return tooManyNodes("RTDS")
	}
	defer m.disconnect(n)

	ctx := stream.Context()
	answers := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				answers <- err
				return
			}
			m.answer(n, req)
		}
	}()
	beat := time.NewTicker(max(m.set.TTL/3, 10*time.Millisecond))
	defer beat.Stop()
	send := true // the first response: a whole layer
	for {
		if send {
			resp, err := m.response(n)
			if err != nil {
				return err
			}
			if resp != nil {
				if err := stream.Send(resp); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-answers:
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		case <-n.wakeC:
			send = true
		case <-beat.C:
			send = true
		}
	}
}

// connect registers a stream of node id, whose Envoy runs with the layer
// of version (its request's version_info; "" when it has none). It
// returns nil when permit.MaxNodes Envoys are known already.
func (m *Manager) connect(id, version string) *node {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	n := m.nodes[id]
	if n == nil && len(m.nodes) >= permit.MaxNodes {
		return nil
	}
	if n == nil {
		n = newNode(id, m.set.Interval)
		m.nodes[id] = n
	}
	n.conns++
	n.resend = true
	if n.conns > 1 {
		m.duplicateLocked(n)
	}
	boot, seq, limits, ok := parseVersion(version)
	if len(n.heldTotal()) > 0 && (!ok || boot != m.boot || seq != n.lastSeq()) {
		// Maybe another Envoy process with the node id of one that held
		// shares: it runs with no layer of ours, or not with the last one
		// sent (the same process whose stream broke before the last layer
		// reached it looks the same, and is treated the same: safe, if
		// less generous). The old one's requests may still run: its shares
		// are kept until they cannot.
		until := n.lastSent.Add(m.Tail())
		for name, s := range n.shares {
			if len(s.held) > 0 {
				m.orphans = append(m.orphans, orphan{node: id, unit: name, held: s.held, until: until})
			}
		}
		n.shares, n.sent, n.inflight, n.dropped = map[string]*share{}, nil, map[string]int{}, map[string]int{}
		n.recent = map[string]*[recentReports]int{}
	}
	if ok && boot != m.boot {
		// A layer from an earlier Bulkhead process: the Envoy runs with it
		// until it hears from this one, so its shares are counted first.
		m.adoptLocked(n, limits, now)
	}
	if !ok && version != "" {
		m.log.Warn("an Envoy runs with a runtime layer Bulkhead cannot read; its shares are not adopted", "node", id, "version", version)
	}
	return n
}

// adoptLocked counts the shares of limits as n's, already in use (a
// restarted daemon; the Envoy has the layer since before it connected).
func (m *Manager) adoptLocked(n *node, limits map[string]int, now time.Time) {
	adopted := map[string]int{}
	for name, limit := range limits {
		b, critical := unitOf(name)
		l := m.limiters.Get(b)
		if l == nil || limit <= 0 {
			continue
		}
		s := n.share(name)
		if p, ok := m.policies[b]; ok {
			s.cluster = p.Cluster
			if critical {
				s.cluster = CriticalCluster(p.Cluster)
			}
		}
		for len(s.held) < limit {
			p, err := l.Adopt()
			if err != nil {
				break
			}
			s.held = append(s.held, p)
		}
		s.limit, adopted[name] = limit, limit
	}
	if len(adopted) == 0 {
		return
	}
	// The adopted layer bounds the Envoy's use until one of ours settles.
	n.sent = append(n.sent, layer{limits: adopted, acked: true, reports: n.reports, ackAt: now})
	n.lastSent = now
	m.log.Info("shares of an Envoy adopted from its runtime layer", "node", n.id, "shares", adopted)
}

// disconnect ends a stream of n.
func (m *Manager) disconnect(n *node) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n.conns--
}

// lrsConnect registers an LRS stream of node id; nil past permit.MaxNodes.
func (m *Manager) lrsConnect(id string) *node {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nodes[id]
	if n == nil {
		if len(m.nodes) >= permit.MaxNodes {
			return nil
		}
		n = newNode(id, m.set.Interval)
		m.nodes[id] = n
	}
	if n.lrsConns++; n.lrsConns > 1 {
		m.duplicateLocked(n)
	}
	return n
}

// lrsDisconnect ends an LRS stream of n.
func (m *Manager) lrsDisconnect(n *node) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n.lrsConns--
}

// duplicateLocked marks n as two Envoys under one node id.
func (m *Manager) duplicateLocked(n *node) {
	if n.duplicate {
		return
	}
	n.duplicate = true
	for _, s := range n.shares { // the very next layer withdraws them, before any round
		s.strict, s.limit = true, 0
	}
	m.log.Error("two streams of one kind from one node id: two Envoys share it, or an old stream lingers; "+
		"its shares are withdrawn until one is left (give every Envoy a node.id of its own)",
		"node", n.id, "rtds_streams", n.conns, "lrs_streams", n.lrsConns)
}

// response is the next response to n: its whole layer, a new one when
// its shares changed. Envoy 1.40 renews a resource's TTL only when the
// resource comes with its body (a heartbeat of name and TTL alone does
// not: checked against Envoy), so every response carries the layer
// (a few hundred bytes). nil when n has stalled: it is sent nothing until
// it answers, so that its layer's end can be known.
func (m *Manager) response(n *node) (*discovery.DiscoveryResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	if n.isStalled = n.stalled(now, m.set.TTL); n.isStalled {
		return nil, nil
	}
	m.seq++
	m.unbackedLocked(n)
	if n.resend || n.dirty() || len(n.sent) == 0 {
		limits := map[string]int{}
		for name, s := range n.shares {
			limits[name] = s.wire()
		}
		n.sent = append(n.sent, layer{seq: m.seq, limits: limits, clusters: n.clusters()})
		n.resend = false
	}
	last := n.sent[len(n.sent)-1]
	for _, w := range last.limits {
		if w > 0 {
			n.lastShareSent = now
		}
	}
	if n.encoded.seq != last.seq || last.seq == 0 {
		// A new layer: encoded once, re-sent as it is every TTL/3 until the
		// next (an adopted layer, seq 0, is never re-sent).
		enc, err := m.encode(last)
		if err != nil {
			return nil, err
		}
		n.encoded = enc
	}
	version, wrapped := n.encoded.version, n.encoded.resource
	if n.waiting.IsZero() {
		n.waiting = now
	}
	n.lastSent = now
	return &discovery.DiscoveryResponse{
		VersionInfo: version, Resources: []*anypb.Any{wrapped}, TypeUrl: RuntimeType,
		Nonce: strconv.FormatUint(m.seq, 36) + "." + strconv.FormatUint(last.seq, 36),
	}, nil
}

// encodedLayer is a layer as its responses carry it.
type encodedLayer struct {
	seq      uint64
	version  string
	resource *anypb.Any // the discovery Resource: the layer, its version and TTL
}

// encode encodes layer l as a response carries it.
func (m *Manager) encode(l layer) (encodedLayer, error) {
	fields := map[string]*structpb.Value{}
	for name, w := range l.limits {
		fields[ShareKey(l.clusters[name])] = structpb.NewNumberValue(float64(max(w, 0)))
		strict := 0.0
		if w < 0 {
			strict = 100
		}
		fields[strictKeyOf(name)] = structpb.NewNumberValue(strict)
	}
	body, err := anypb.New(&runtimesvc.Runtime{Name: m.set.Layer, Layer: &structpb.Struct{Fields: fields}})
	if err != nil {
		return encodedLayer{}, err
	}
	version := m.version(l)
	wrapped, err := anypb.New(&discovery.Resource{Name: m.set.Layer, Version: version, Resource: body, Ttl: durationpb.New(m.set.TTL)})
	if err != nil {
		return encodedLayer{}, err
	}
	return encodedLayer{seq: l.seq, version: version, resource: wrapped}, nil
}

// answer handles an Envoy's request after a response: an ACK names the
// nonce of the response it applied, a NACK carries error_detail.
func (m *Manager) answer(n *node, req *discovery.DiscoveryRequest) {
	nonce := req.GetResponseNonce()
	_, layerPart, ok := strings.Cut(nonce, ".")
	seq, err := strconv.ParseUint(layerPart, 36, 64)
	if !ok || err != nil {
		return // not an answer to one of ours
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n.waiting, n.isStalled = time.Time{}, false
	if d := req.GetErrorDetail(); d != nil {
		m.log.Error("an Envoy refused its runtime layer: it keeps the last one it took", "node", n.id, "error", d.GetMessage())
		return
	}
	for i := range n.sent {
		if l := &n.sent[i]; l.seq == seq && !l.acked {
			l.acked, l.reports, l.ackAt = true, n.reports, m.clock.Now()
		}
	}
}

// version names a layer: this process, the layer's sequence number and
// its shares (bulkhead=limit, -1 for strict), which a restarted daemon
// reads back from the Envoy's next request.
func (m *Manager) version(l layer) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s.%d;", m.boot, l.seq)
	for i, name := range slices.Sorted(maps.Keys(l.limits)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%d", name, l.limits[name])
	}
	return b.String()
}

// parseVersion reads a version written by version.
func parseVersion(v string) (boot string, seq uint64, limits map[string]int, ok bool) {
	head, body, found := strings.Cut(v, ";")
	boot, seqText, dot := strings.Cut(head, ".")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if !found || !dot || boot == "" || err != nil {
		return "", 0, nil, false
	}
	limits = map[string]int{}
	if body == "" {
		return boot, seq, limits, true
	}
	for _, kv := range strings.Split(body, ",") {
		name, num, eq := strings.Cut(kv, "=")
		n, err := strconv.Atoi(num)
		if !eq || err != nil || name == "" {
			return "", 0, nil, false
		}
		limits[name] = n
	}
	return boot, seq, limits, true
}

// checkNode refuses a stream of service whose first request names no
// valid node id.
func checkNode(service, id string) error {
	if !permit.ValidNodeID(id) {
		return status.Errorf(codes.InvalidArgument, "%s: the first request must name a valid node id (got %q)", service, id)
	}
	return nil
}

// tooManyNodes refuses a stream of service from a node past permit.MaxNodes.
func tooManyNodes(service string) error {
	return status.Errorf(codes.ResourceExhausted, "%s: Bulkhead serves at most %d Envoys (permit.MaxNodes)", service, permit.MaxNodes)
}

type lrs struct {
	loadstats.UnimplementedLoadReportingServiceServer
	m *Manager
}

// StreamLoadStats asks each Envoy for the requests in flight in the share
// clusters every Interval, and records its reports.
func (r lrs) StreamLoadStats(stream loadstats.LoadReportingService_StreamLoadStatsServer) error {
	m := r.m
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	id := req.GetNode().GetId()
	if err := checkNode("LRS", id); err != nil {
		return err
	}
	n := m.lrsConnect(id)
	if n == nil {
		return tooManyNodes("LRS")
	}
	defer m.lrsDisconnect(n)
	reports := make(chan *loadstats.LoadStatsRequest)
	failed := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				failed <- err
				return
			}
			select {
			case reports <- req:
			case <-stream.Context().Done():
				return
			}
		}
	}()
	var asked []string
	var every time.Duration
	for {
		// The clusters to report, and how often: every Interval, or
		// FastInterval while a share of the Envoy waits to shrink (its
		// permits come back two reports after its acknowledgement).
		clusters, interval := m.lrsWants(n)
		if !slices.Equal(clusters, asked) || interval != every {
			asked, every = clusters, interval
			if err := stream.Send(&loadstats.LoadStatsResponse{
				Clusters: clusters, LoadReportingInterval: durationpb.New(interval),
			}); err != nil {
				return err
			}
		}
		select {
		case req := <-reports:
			m.report(n, req.GetClusterStats())
		case <-n.lrsWakeC:
		case err := <-failed:
			if errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-stream.Context().Done():
			return nil
		}
	}
}

// FastInterval is the load report interval of an Envoy with a share
// waiting to shrink (at most Interval).
const FastInterval = 100 * time.Millisecond

// lrsWants returns the share clusters, sorted, and how often n should
// report them.
func (m *Manager) lrsWants(n *node) ([]string, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	interval := m.set.Interval
	if n.shrinking() {
		interval = min(interval, FastInterval)
	}
	return m.clusters, interval
}

// report records an Envoy's load report: the requests in flight in each
// share cluster it names, and how many more its circuit breaker turned
// away would have had in flight.
func (m *Manager) report(n *node, stats []*endpointv3.ClusterStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, cs := range stats {
		if _, ok := m.byCluster[cs.GetClusterName()]; !ok {
			continue
		}
		var inflight, issued uint64
		for _, loc := range cs.GetUpstreamLocalityStats() {
			inflight += loc.GetTotalRequestsInProgress()
			issued += loc.GetTotalIssuedRequests()
		}
		c := m.requestsOf(bulkheadOf(m.byCluster[cs.GetClusterName()]))
		c[0] += issued
		c[1] += cs.GetTotalDroppedRequests()
		n.inflight[cs.GetClusterName()] = int(min(inflight, 1<<30))
		n.dropped[cs.GetClusterName()] = turnedAway(inflight, issued, cs.GetTotalDroppedRequests())
		r := n.recent[cs.GetClusterName()]
		if r == nil {
			r = new([recentReports]int)
			n.recent[cs.GetClusterName()] = r
		}
		copy(r[1:], r[:recentReports-1])
		r[0] = n.inflight[cs.GetClusterName()] + n.dropped[cs.GetClusterName()]
		if cs.GetTotalDroppedRequests() > 0 {
			// A circuit breaker turns a request away only with its share in
			// flight: whatever the report's instant shows, the interval's
			// peak was above the share the Envoy runs with. (By Little's law
			// a burst's overflows are a small concurrency, which would not
			// grow the share that overflowed.)
			r[0] = max(r[0], n.applied(m.byCluster[cs.GetClusterName()])+1)
		}
	}
	n.reports++
}

// requestsOf is the request counts of bulkhead name, made at its first
// report.
func (m *Manager) requestsOf(name string) *[2]uint64 {
	c := m.requests[name]
	if c == nil {
		c = new([2]uint64)
		m.requests[name] = c
	}
	return c
}

// turnedAway is the concurrency the requests a circuit breaker turned
// away in an interval would have had: by Little's law in flight ×
// dropped / issued (the dropped requests at the rate and duration of the
// issued ones). Dropped with nothing issued: as many again as in flight
// (at least one).
func turnedAway(inflight, issued, dropped uint64) int {
	switch {
	case dropped == 0:
		return 0
	case issued == 0:
		return int(min(max(inflight, 1), 1<<30))
	}
	return int(min((inflight*dropped+issued-1)/issued, 1<<30))
}

// Run makes shares follow demand every Interval until ctx ends, then
// gives back every permit the shares hold.
func (m *Manager) Run(ctx context.Context) error {
	t := time.NewTicker(m.set.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if m.lender != nil {
				// On capacity leases the permits stay held: the lease's last
				// call (the process stops) then counts them in Redis for the
				// Tail after its end, as long as an Envoy may still use them.
				return nil
			}
			m.mu.Lock()
			for _, n := range m.nodes {
				release(n.heldTotal())
				n.shares = map[string]*share{}
			}
			for _, o := range m.orphans {
				release(o.held)
			}
			m.orphans = nil
			m.mu.Unlock()
			return nil
		case <-t.C:
			m.Round()
		}
	}
}
