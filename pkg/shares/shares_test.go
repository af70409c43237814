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
	node     *node
	limit    int  // the applied share (0 before any layer: strict)
	strict   bool // the applied layer routes through ext_authz
	inflight []time.Time
	version  string
	layerEnd time.Time // the applied layer's TTL runs out
	// responses sent and not yet delivered; answers to deliver.
	pending []*discovery.DiscoveryResponse
	answers []*discovery.DiscoveryRequest
	reports []int // load reports generated, not yet received
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

func report(inflight int) []*endpointv3.ClusterStats {
	return []*endpointv3.ClusterStats{{ClusterName: testCluster,
		UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{TotalRequestsInProgress: uint64(inflight)}}}}
}

// held is what the manager holds for e, orphans included.
func held(m *Manager, id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := 0
	if n := m.nodes[id]; n != nil {
		h = len(n.heldTotal())
	}
	for _, o := range m.orphans {
		h += len(o.held)
	}
	return h
}

// TestModelNeverOverShare drives simulated Envoys through random loads,
// delays, lost answers, disconnects and restarts, and checks at every step
// that what each Envoy runs under its share is backed by permits the
// manager holds, and that the bulkhead's limiter is never over its limit.
func TestModelNeverOverShare(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed) })
	}
}

func runModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	clk := clock.NewFake(t0)
	const limit = 20
	m, reg := newTestManager(t, limit, clk)
	l := reg.Get("orders")
	envoys := []*envoy{{id: "a"}, {id: "b"}}
	for _, e := range envoys {
		e.node = m.connect(e.id, "")
	}
	step := 50 * time.Millisecond
	admitted := 0
	for i := range 2000 {
		now := clk.Now()
		for _, e := range envoys {
			e.expire(now)
			run := e.running(now)
			if e.node != nil && rng.IntN(4) == 0 { // the daemon sends
				if r, err := m.response(e.node); err != nil {
					t.Fatal(err)
				} else if r != nil {
					e.pending = append(e.pending, r)
				}
			}
			if len(e.pending) > 0 && rng.IntN(3) == 0 { // delivered, in order
				e.apply(t, e.pending[0], now)
				e.pending = e.pending[1:]
			}
			if len(e.answers) > 0 && rng.IntN(3) == 0 && e.node != nil {
				if rng.IntN(20) > 0 { // answers get lost sometimes
					m.answer(e.node, e.answers[0])
				}
				e.answers = e.answers[1:]
			}
			if i%20 == 0 {
				e.reports = append(e.reports, run)
			}
			if len(e.reports) > 0 && rng.IntN(8) == 0 { // received late, in order
				if e.node != nil {
					m.report(e.id, report(e.reports[0]))
				}
				e.reports = e.reports[1:]
			}
			// Arrivals under the share: the circuit breaker admits below it.
			for range rng.IntN(4) {
				if !e.strict && e.running(now) < e.limit {
					e.inflight = append(e.inflight, now.Add(time.Duration(rng.IntN(1500))*time.Millisecond))
					admitted++
				}
			}
			// Faults: the stream ends (the Envoy keeps its layer), comes back.
			switch {
			case e.node != nil && rng.IntN(400) == 0:
				m.disconnect(e.node)
				e.node, e.pending, e.answers = nil, nil, nil
			case e.node == nil && rng.IntN(40) == 0:
				e.node = m.connect(e.id, e.version)
			}
		}
		if i%20 == 0 {
			m.Round()
		}
		for _, e := range envoys {
			if run, h := e.running(now), held(m, e.id); run > h {
				t.Fatalf("step %d: Envoy %s runs %d requests under its share but the manager holds %d permits for it", i, e.id, run, h)
			}
		}
		if in := l.Snapshot().InUse; in > limit {
			t.Fatalf("step %d: %d permits in use on a limit of %d", i, in, limit)
		}
		clk.Advance(step)
	}
	if admitted < 500 {
		t.Fatalf("only %d requests admitted under shares in 2000 steps: the model does not exercise them", admitted)
	}
	// Everyone gone: every permit comes back after the tail.
	for _, e := range envoys {
		if e.node != nil {
			m.disconnect(e.node)
		}
	}
	clk.Advance(m.Tail() + time.Second)
	m.Round()
	if in := l.Snapshot().InUse; in != 0 {
		t.Fatalf("%d permits still held after every Envoy left and the tail passed", in)
	}
}
