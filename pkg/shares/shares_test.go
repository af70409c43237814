package shares

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	runtimesvc "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

const testCluster = "orders_shares"

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testSettings() Settings {
	return Settings{TTL: 3 * time.Second, MaxRequest: 2 * time.Second, Interval: time.Second, Layer: DefaultLayer}
}

func newTestManager(t *testing.T, limit int, clk *clock.Fake) (*Manager, *bulkhead.Registry) {
	t.Helper()
	reg := bulkhead.NewRegistry(bulkhead.WithClock(clk))
	if _, err := reg.Apply(map[string]bulkhead.Settings{"orders": {MaxConcurrent: limit}}); err != nil {
		t.Fatal(err)
	}
	m := New(testSettings(), reg, clk, nil)
	m.Apply(map[string]Policy{"orders": {Mode: Auto, Cluster: testCluster}})
	return m, reg
}

// envoy is a model of one Envoy: the layer it applied, its circuit
// breaker and its requests in flight under the share.
type envoy struct {
	id       string
	node     *node // its RTDS stream's node (nil: no stream)
	lrs      *node // its LRS stream's
	limit    int   // the applied share (0 before any layer: strict)
	strict   bool  // the applied layer routes through ext_authz
	inflight []time.Time
	version  string
	layerEnd time.Time // the applied layer's TTL runs out
	// responses sent and not yet delivered; answers to deliver.
	pending []*discovery.DiscoveryResponse
	sentAt  []time.Time // of each pending response
	answers []*discovery.DiscoveryRequest
	reports [][2]int // load reports generated, not yet received: in flight, dropped
	dropped int      // arrivals its circuit breaker turned away since the last report
}

func (e *envoy) apply(t *testing.T, r *discovery.DiscoveryResponse, now time.Time) {
	t.Helper()
	var res discovery.Resource
	if err := r.GetResources()[0].UnmarshalTo(&res); err != nil {
		t.Fatal(err)
	}
	e.layerEnd = now.Add(res.GetTtl().AsDuration())
	if res.GetResource() != nil {
		var rt runtimesvc.Runtime
		if err := res.GetResource().UnmarshalTo(&rt); err != nil {
			t.Fatal(err)
		}
		f := rt.GetLayer().GetFields()
		e.limit = int(f[ShareKey(testCluster)].GetNumberValue())
		e.strict = f[StrictKey("orders")].GetNumberValue() == 100
		e.version = r.GetVersionInfo()
	}
	e.answers = append(e.answers, &discovery.DiscoveryRequest{VersionInfo: e.version, ResponseNonce: r.GetNonce()})
}

// expire drops the layer once its TTL has run out (the static layer: strict).
func (e *envoy) expire(now time.Time) {
	if !e.layerEnd.IsZero() && !now.Before(e.layerEnd) {
		e.limit, e.strict, e.version = 0, true, ""
	}
}

func (e *envoy) running(now time.Time) int {
	kept := e.inflight[:0]
	for _, end := range e.inflight {
		if now.Before(end) {
			kept = append(kept, end)
		}
	}
	e.inflight = kept
	return len(kept)
}

func report(inflight int) []*endpointv3.ClusterStats { return reportDropped(inflight, 0, 0) }

// reportDropped is a load report of the share cluster: inflight requests
// in flight, issued and dropped (by the circuit breaker) in its interval.
func reportDropped(inflight, issued, dropped int) []*endpointv3.ClusterStats {
	return []*endpointv3.ClusterStats{{ClusterName: testCluster, TotalDroppedRequests: uint64(dropped),
		UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{TotalRequestsInProgress: uint64(inflight), TotalIssuedRequests: uint64(issued)}}}}
}

// held is what the manager holds for node id, its orphans included.
func held(m *Manager, id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := 0
	if n := m.nodes[id]; n != nil {
		h = len(n.heldTotal())
	}
	for _, o := range m.orphans {
		if o.node == id {
			h += len(o.held)
		}
	}
	return h
}

// TestModelNeverOverShare drives simulated Envoys through random loads,
// delays, lost answers, late reports, disconnects, process restarts under
// the same node id and a second process sharing one node id, and checks at
// every step that what the processes of each node id run under their
// shares (a dead process's requests included) is backed by permits the
// manager holds for that id, and that the limiter is never over its limit.
func TestModelNeverOverShare(t *testing.T) {
	for seed := range uint64(100) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed) })
	}
}

func runModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	clk := clock.NewFake(t0)
	const limit = 20
	m, reg := newTestManager(t, limit, clk)
	l := reg.Get("orders")
	connect := func(e *envoy) {
		e.node, e.lrs = m.connect(e.id, e.version), m.lrsConnect(e.id)
	}
	envoys := []*envoy{{id: "a"}, {id: "b"}}
	for _, e := range envoys {
		connect(e)
	}
	twin := &envoy{id: "a"} // a second process under node id a, now and then
	var dead []*envoy       // processes killed: their requests still run upstream
	step := 50 * time.Millisecond
	admitted := 0
	for i := range 2000 {
		now := clk.Now()
		procs := append([]*envoy{}, envoys...)
		if twin.node != nil {
			procs = append(procs, twin)
		}
		for _, e := range procs {
			e.expire(now)
			run := e.running(now)
			if e.node != nil && rng.IntN(4) == 0 { // the daemon sends
				if r, err := m.response(e.node); err != nil {
					t.Fatal(err)
				} else if r != nil {
					e.pending, e.sentAt = append(e.pending, r), append(e.sentAt, now)
				}
			}
			// Delivered in order, late, but within 200 ms of being sent: the
			// delay the tail allows for (docs/shares.md).
			for len(e.pending) > 0 && (rng.IntN(3) == 0 || now.Sub(e.sentAt[0]) >= 150*time.Millisecond) {
				e.apply(t, e.pending[0], now)
				e.pending, e.sentAt = e.pending[1:], e.sentAt[1:]
			}
			if len(e.answers) > 0 && rng.IntN(3) == 0 && e.node != nil {
				if rng.IntN(20) > 0 { // answers get lost sometimes
					m.answer(e.node, e.answers[0])
				}
				e.answers = e.answers[1:]
			}
			if i%20 == 0 {
				e.reports = append(e.reports, [2]int{run, e.dropped})
				e.dropped = 0
			}
			if len(e.reports) > 0 && rng.IntN(8) == 0 { // received late, in order
				if e.lrs != nil {
					m.report(e.lrs, reportDropped(e.reports[0][0], e.reports[0][0], e.reports[0][1]))
				}
				e.reports = e.reports[1:]
			}
			// Arrivals under the share: the circuit breaker admits below it.
			for range rng.IntN(4) {
				switch {
				case e.strict:
				case e.running(now) < e.limit:
					e.inflight = append(e.inflight, now.Add(time.Duration(rng.IntN(1500))*time.Millisecond))
					admitted++
				default:
					e.dropped++ // its circuit breaker's 503
				}
			}
		}
		for j, e := range envoys {
			switch {
			case e.node != nil && rng.IntN(400) == 0: // the streams end; the Envoy keeps its layer
				m.disconnect(e.node)
				m.lrsDisconnect(e.lrs)
				e.node, e.lrs, e.pending, e.sentAt, e.answers = nil, nil, nil, nil, nil
			case e.node == nil && rng.IntN(40) == 0:
				connect(e)
			case e.node != nil && rng.IntN(600) == 0: // SIGKILL, and a new process under its id
				m.disconnect(e.node)
				m.lrsDisconnect(e.lrs)
				dead = append(dead, e)
				envoys[j] = &envoy{id: e.id}
				connect(envoys[j])
			}
		}
		switch {
		case twin.node == nil && rng.IntN(300) == 0:
			twin = &envoy{id: "a"}
			connect(twin)
		case twin.node != nil && rng.IntN(100) == 0:
			m.disconnect(twin.node)
			m.lrsDisconnect(twin.lrs)
			dead = append(dead, twin)
			twin = &envoy{id: "a"}
		}
		if i%20 == 0 {
			m.Round()
		}
		runs := map[string]int{}
		for _, e := range append(append(append([]*envoy{}, envoys...), twin), dead...) {
			runs[e.id] += e.running(now)
		}
		for id, run := range runs {
			if h := held(m, id); run > h {
				t.Fatalf("step %d: the processes of node %s run %d requests under shares but the manager holds %d permits for it", i, id, run, h)
			}
		}
		if in := l.Snapshot().InUse; in > limit {
			t.Fatalf("step %d: %d permits in use on a limit of %d", i, in, limit)
		}
		clk.Advance(step)
	}
	if admitted < 300 {
		t.Fatalf("only %d requests admitted under shares in 2000 steps: the model does not exercise them", admitted)
	}
	// Everyone gone: every permit comes back after the tail.
	for _, e := range append(envoys, twin) {
		if e.node != nil {
			m.disconnect(e.node)
			m.lrsDisconnect(e.lrs)
		}
	}
	clk.Advance(m.Tail() + time.Second)
	m.Round()
	if in := l.Snapshot().InUse; in != 0 {
		t.Fatalf("%d permits still held after every Envoy left and the tail passed", in)
	}
}

type fixedSampler struct{ inUse, peak int }

func (f fixedSampler) Keys() []string                { return []string{"orders"} }
func (f fixedSampler) InUse(string) (int, int, bool) { return f.inUse, f.peak, true }

// TestSamplerCountsCallsNotShares: sizing sees the requests an Envoy
// reports under its share, not the permits held for it.
func TestSamplerCountsCallsNotShares(t *testing.T) {
	clk := clock.NewFake(t0)
	m, reg := newTestManager(t, 20, clk)
	n := m.connect("a", "")
	m.lrsConnect("a")
	m.report(n, report(3))
	m.Round()
	held, _ := m.usage("orders")
	if held == 0 {
		t.Fatal("no share handed out")
	}
	strict, err := reg.Get("orders").TryAcquire(bulkhead.Normal) // one strict permit besides
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Release()
	in := reg.Get("orders").Snapshot().InUse
	got, peak, ok := m.Sampler(fixedSampler{in, in + 2}).InUse("orders")
	if !ok || got != 1+3 || peak != 1+3+2 {
		t.Errorf("sampled %d in use (peak %d), want 4 (1 strict + 3 reported under a share of %d), peak 6", got, peak, held)
	}
}
