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
	return newTestManagerWith(t, bulkhead.Settings{MaxConcurrent: limit}, clk)
}

// newTestManagerWith is newTestManager with bulkhead orders' settings.
func newTestManagerWith(t *testing.T, set bulkhead.Settings, clk *clock.Fake) (*Manager, *bulkhead.Registry) {
	t.Helper()
	reg := bulkhead.NewRegistry(bulkhead.WithClock(clk))
	if _, err := reg.Apply(map[string]bulkhead.Settings{"orders": set}); err != nil {
		t.Fatal(err)
	}
	m := New(testSettings(), reg, clk, nil)
	m.Apply(map[string]Policy{"orders": {Mode: Auto, Cluster: testCluster}})
	return m, reg
}

// The classes of an Envoy's share routes: a share route to the share
// cluster (normal), and one to its critical share cluster (critical).
const (
	normalClass = iota
	criticalClass
)

var testCritical = CriticalCluster(testCluster)

// envoy is a model of one Envoy: the layer it applied, its circuit
// breakers (one per class) and its requests in flight under the shares.
type envoy struct {
	id       string
	node     *node   // its RTDS stream's node (nil: no stream)
	lrs      *node   // its LRS stream's
	limit    [2]int  // by class: the applied share (0 before any layer: strict)
	strict   [2]bool // by class: the applied layer routes through ext_authz
	inflight [2][]time.Time
	version  string
	layerEnd time.Time // the applied layer's TTL runs out
	// responses sent and not yet delivered; answers to deliver.
	pending []*discovery.DiscoveryResponse
	sentAt  []time.Time // of each pending response
	answers []*discovery.DiscoveryRequest
	reports [][2][2]int // load reports generated, not yet received: by class, in flight and dropped
	dropped [2]int      // by class: arrivals its circuit breaker turned away since the last report
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
		for c, keys := range [2][2]string{{ShareKey(testCluster), StrictKey("orders")}, {ShareKey(testCritical), CriticalStrictKey("orders")}} {
			e.limit[c] = int(f[keys[0]].GetNumberValue())
			strict, ok := f[keys[1]] // without the key: its static default, 100
			e.strict[c] = !ok || strict.GetNumberValue() == 100
		}
		e.version = r.GetVersionInfo()
	}
	e.answers = append(e.answers, &discovery.DiscoveryRequest{VersionInfo: e.version, ResponseNonce: r.GetNonce()})
}

// expire drops the layer once its TTL has run out (the static layer: strict).
func (e *envoy) expire(now time.Time) {
	if !e.layerEnd.IsZero() && !now.Before(e.layerEnd) {
		e.limit, e.strict, e.version = [2]int{}, [2]bool{true, true}, ""
	}
}

// running is how many requests of class c run under e's share at now.
func (e *envoy) running(c int, now time.Time) int {
	kept := e.inflight[c][:0]
	for _, end := range e.inflight[c] {
		if now.Before(end) {
			kept = append(kept, end)
		}
	}
	e.inflight[c] = kept
	return len(kept)
}

func report(inflight int) []*endpointv3.ClusterStats { return reportDropped(inflight, 0, 0) }

// reportDropped is a load report of the share cluster: inflight requests
// in flight, issued and dropped (by the circuit breaker) in its interval.
// It leaves the critical share cluster out: an Envoy with no critical route.
func reportDropped(inflight, issued, dropped int) []*endpointv3.ClusterStats {
	return []*endpointv3.ClusterStats{clusterStats(testCluster, inflight, issued, dropped)}
}

func clusterStats(cluster string, inflight, issued, dropped int) *endpointv3.ClusterStats {
	return &endpointv3.ClusterStats{ClusterName: cluster, TotalDroppedRequests: uint64(dropped),
		UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{TotalRequestsInProgress: uint64(inflight), TotalIssuedRequests: uint64(issued)}}}
}

// reportBoth is a load report of both share clusters, normal and critical.
func reportBoth(normal, critical int) []*endpointv3.ClusterStats {
	return []*endpointv3.ClusterStats{clusterStats(testCluster, normal, 0, 0), clusterStats(testCritical, critical, 0, 0)}
}

// held is what the manager holds for node id's share u (the bulkhead, or
// its critical unit), its orphans included.
func held(m *Manager, id, u string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := 0
	if n := m.nodes[id]; n != nil {
		h = n.held(u)
	}
	for _, o := range m.orphans {
		if o.node == id && o.unit == u {
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
// manager holds for that id, class by class (its critical share as well
// as its normal one), that the limiter is never over its limit with strict
// permits of both classes taken beside the shares, and that normal shares
// and permits never take the critical reserve.
func TestModelNeverOverShare(t *testing.T) {
	for seed := range uint64(100) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed, false) })
	}
}

// TestModelNeverOverShareOnLeases is the model on a capacity lease (Lend)
// that is renewed now and then and lapses for a second or two at times
// (a replica cut off from Redis): besides every check of the model, no
// response carries a share while the lease does not back it.
func TestModelNeverOverShareOnLeases(t *testing.T) {
	for seed := range uint64(50) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed, true) })
	}
}

// modelLease is a capacity lease in the model: it backs shares until
// until, and is far from the limit while far.
type modelLease struct {
	clk   *clock.Fake
	until time.Time
	far   bool
}

func (l *modelLease) Backs(string, time.Duration) bool { return l.clk.Now().Before(l.until) }
func (l *modelLease) Far(string) bool                  { return l.far }

// layerShares are the shares a response's layer grants (key: share key).
func layerShares(t *testing.T, r *discovery.DiscoveryResponse) map[string]float64 {
	t.Helper()
	var res discovery.Resource
	if err := r.GetResources()[0].UnmarshalTo(&res); err != nil {
		t.Fatal(err)
	}
	var rt runtimesvc.Runtime
	if err := res.GetResource().UnmarshalTo(&rt); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, k := range [...]string{ShareKey(testCluster), ShareKey(testCritical)} {
		if v, ok := rt.GetLayer().GetFields()[k]; ok && v.GetNumberValue() > 0 {
			out[k] = v.GetNumberValue()
		}
	}
	return out
}

func runModel(t *testing.T, seed uint64, leased bool) {
	rng := rand.New(rand.NewPCG(seed, 7))
	clk := clock.NewFake(t0)
	const limit = 20
	m, reg := newTestManagerWith(t, bulkhead.Settings{MaxConcurrent: limit, ReserveCritical: 0.25}, clk)
	l := reg.Get("orders")
	var lease *modelLease
	if leased {
		lease = &modelLease{clk: clk, until: t0.Add(time.Second), far: true}
		m.Lend(lease)
	}
	type strictPermit struct {
		p        bulkhead.Permit
		critical bool
		end      time.Time
	}
	var strict []strictPermit // strict requests beside the shares
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
	var admitted [2]int
	for i := range 2000 {
		now := clk.Now()
		procs := append([]*envoy{}, envoys...)
		if twin.node != nil {
			procs = append(procs, twin)
		}
		for _, e := range procs {
			e.expire(now)
			if e.node != nil && rng.IntN(4) == 0 { // the daemon sends
				if r, err := m.response(e.node); err != nil {
					t.Fatal(err)
				} else if r != nil {
					if lease != nil && !lease.Backs("orders", 0) {
						if got := layerShares(t, r); len(got) > 0 {
							t.Fatalf("step %d: a layer with shares %v sent while the lease did not back them", i, got)
						}
					}
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
				e.reports = append(e.reports, [2][2]int{{e.running(normalClass, now), e.dropped[normalClass]}, {e.running(criticalClass, now), e.dropped[criticalClass]}})
				e.dropped = [2]int{}
			}
			if len(e.reports) > 0 && rng.IntN(8) == 0 { // received late, in order
				if e.lrs != nil {
					r := e.reports[0]
					m.report(e.lrs, []*endpointv3.ClusterStats{
						clusterStats(testCluster, r[normalClass][0], r[normalClass][0], r[normalClass][1]),
						clusterStats(testCritical, r[criticalClass][0], r[criticalClass][0], r[criticalClass][1]),
					})
				}
				e.reports = e.reports[1:]
			}
			// Arrivals under the shares: each circuit breaker admits below
			// its own share (critical requests are fewer).
			for c, most := range [2]int{4, 2} {
				if c == criticalClass && rng.IntN(3) > 0 {
					continue
				}
				for range rng.IntN(most) {
					switch {
					case e.strict[c]:
					case e.running(c, now) < e.limit[c]:
						e.inflight[c] = append(e.inflight[c], now.Add(time.Duration(rng.IntN(1500))*time.Millisecond))
						admitted[c]++
					default:
						e.dropped[c]++ // its circuit breaker's 503
					}
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
		// Strict requests of both classes beside the shares.
		kept := strict[:0]
		for _, sp := range strict {
			if now.Before(sp.end) {
				kept = append(kept, sp)
			} else {
				sp.p.Release()
			}
		}
		strict = kept
		if rng.IntN(6) == 0 {
			critical := rng.IntN(3) == 0
			class := bulkhead.Normal
			if critical {
				class = bulkhead.Critical
			}
			if p, err := l.TryAcquire(class); err == nil {
				strict = append(strict, strictPermit{p, critical, now.Add(time.Duration(rng.IntN(500)) * time.Millisecond)})
			}
		}
		if i%20 == 0 {
			m.Round()
		}
		if lease != nil {
			switch {
			case rng.IntN(400) == 0: // cut off: no renewal for a while
				lease.until = now.Add(time.Duration(rng.IntN(500)) * time.Millisecond)
			case rng.IntN(4) == 0 && now.After(lease.until.Add(-800*time.Millisecond)): // renewed
				lease.until = now.Add(time.Second)
			case lease.far && rng.IntN(300) == 0, !lease.far && rng.IntN(40) == 0: // near the limit now and then
				lease.far = !lease.far
			}
		}
		runs := map[string][2]int{}
		for _, e := range append(append(append([]*envoy{}, envoys...), twin), dead...) {
			r := runs[e.id]
			r[normalClass] += e.running(normalClass, now)
			r[criticalClass] += e.running(criticalClass, now)
			runs[e.id] = r
		}
		normal := 0 // normal shares and strict permits: never into the critical reserve
		for id, run := range runs {
			for c, u := range [2]string{"orders", criticalUnit("orders")} {
				if h := held(m, id, u); run[c] > h {
					t.Fatalf("step %d: the processes of node %s run %d requests under their share %s but the manager holds %d permits for it", i, id, run[c], u, h)
				}
			}
			normal += held(m, id, "orders")
		}
		for _, sp := range strict {
			if !sp.critical {
				normal++
			}
		}
		if in := l.Snapshot().InUse; in > limit {
			t.Fatalf("step %d: %d permits in use on a limit of %d", i, in, limit)
		}
		if ceiling := l.Snapshot().Settings.Ceiling(bulkhead.Normal); normal > ceiling {
			t.Fatalf("step %d: normal shares and strict permits hold %d of the %d below the critical reserve", i, normal, ceiling)
		}
		clk.Advance(step)
	}
	if admitted[normalClass] < 80 || admitted[criticalClass] < 20 {
		t.Fatalf("only %d normal and %d critical requests admitted under shares in 2000 steps: the model does not exercise them", admitted[normalClass], admitted[criticalClass])
	}
	for _, sp := range strict {
		sp.p.Release()
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
