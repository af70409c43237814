package shares

import (
	"slices"
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	runtimesvc "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// criticalSettings: a limit of 20 with a critical reserve of 4.
var criticalSettings = bulkhead.Settings{MaxConcurrent: 20, ReserveCritical: 0.2}

// layerFields are the runtime keys of the last layer id applied.
func (s *sizingMesh) layerFields(id string) map[string]float64 {
	s.t.Helper()
	var res discovery.Resource
	if err := s.last[id].GetResources()[0].UnmarshalTo(&res); err != nil {
		s.t.Fatal(err)
	}
	var rt runtimesvc.Runtime
	if err := res.GetResource().UnmarshalTo(&rt); err != nil {
		s.t.Fatal(err)
	}
	out := map[string]float64{}
	for k, v := range rt.GetLayer().GetFields() {
		out[k] = v.GetNumberValue()
	}
	return out
}

// TestCriticalShareFollowsCriticalDemand: an Envoy whose load reports name
// the critical share cluster (it has a critical share route) gets a
// critical share of its own, its demand plus an equal part of the critical
// reserve, that follows its critical demand; an Envoy that does
// not name it gets none, and its critical route stays strict (the key is
// not in its layer: the static 100).
func TestCriticalShareFollowsCriticalDemand(t *testing.T) {
	s := newSizingMeshWith(t, criticalSettings, "a", "b")
	crit := criticalUnit("orders")
	s.m.report(s.nodes["a"], reportBoth(1, 0))
	s.m.report(s.nodes["b"], report(1))
	s.round()
	if got := s.shareOf("a", crit); got != 4 {
		t.Fatalf("a's critical share at no critical demand: %d, want the reserve, 4", got)
	}
	a, b := s.layerFields("a"), s.layerFields("b")
	if a[ShareKey(testCritical)] != 4 || a[CriticalStrictKey("orders")] != 0 || a[StrictKey("orders")] != 0 {
		t.Errorf("a's layer %v: want its critical share 2 and neither route strict", a)
	}
	if _, ok := b[CriticalStrictKey("orders")]; ok || s.nodes["b"].shares[crit] != nil {
		t.Errorf("b names no critical share cluster, yet its layer %v says a critical share", b)
	}
	s.m.report(s.nodes["a"], reportBoth(1, 5))
	s.round()
	if got := s.shareOf("a", crit); got != 10 {
		t.Errorf("a's critical share at 5 critical in flight: %d, want max(5 + 4, 2 x 5) = 10", got)
	}
	for range recentReports {
		s.m.report(s.nodes["a"], reportBoth(1, 1))
	}
	s.settle(map[string]int{"a": 1, "b": 1})
	if got := s.shareOf("a", crit); got != 5 {
		t.Errorf("a's critical share back at 1 critical in flight: %d, want 1 + 4 = 5", got)
	}
}

// TestCriticalReserveStaysCritical: normal shares never take the critical
// reserve, however much their Envoys want: it stays for strict critical
// requests while no Envoy has a critical share, and a critical share takes
// it when one comes; normal shares are counted against normal's ceiling
// with the critical shares' headroom left out (it sits in the reserve).
func TestCriticalReserveStaysCritical(t *testing.T) {
	s := newSizingMeshWith(t, criticalSettings, "a", "b")
	s.m.Apply(map[string]Policy{"orders": {Mode: Shares, Cluster: testCluster}}) // no switch: shares at any load
	crit := criticalUnit("orders")
	l := s.reg.Get("orders")
	normalHeld := func() int {
		s.m.mu.Lock()
		defer s.m.mu.Unlock()
		return s.m.heldLocked("orders")
	}
	s.m.report(s.nodes["a"], report(0)) // a has no critical route yet
	s.m.report(s.nodes["b"], report(0))
	s.round()
	flood := func() {
		for range 3 { // b floods: every report at its share, with overflows
			s.m.report(s.nodes["b"], reportDropped(max(s.share("b"), 0), 100, 100))
			s.round()
		}
	}
	flood()
	if held := normalHeld(); held != 16 {
		t.Fatalf("normal shares hold %d on a limit of 20 with a critical reserve of 4 under a flood, want its ceiling, 16", held)
	}
	if _, err := l.TryAcquire(bulkhead.Normal); err == nil {
		t.Fatal("a strict normal request was admitted with normal shares at their ceiling")
	}
	p, err := l.TryAcquire(bulkhead.Critical)
	if err != nil {
		t.Fatalf("a strict critical request beside normal shares at their ceiling: %v", err)
	}
	p.Release()

	s.m.report(s.nodes["a"], reportBoth(0, 0)) // a's critical route: its share comes from the reserve
	s.round()
	flood()
	if got, held, in := s.shareOf("a", crit), normalHeld(), l.Snapshot().InUse; got != 4 || held > 16 || in > 20 {
		t.Errorf("a's critical share %d beside normal shares of %d (%d in use): want the reserve, 4, normal at most 16, at most 20 in use", got, held, in)
	}
}

// TestSwitchShrinksBothShares: mode auto counts critical demand with the
// rest; going strict shrinks both shares of every Envoy to 0 (both routes
// strict), and their permits come back as the Envoys report them drained.
func TestSwitchShrinksBothShares(t *testing.T) {
	s := newSizingMeshWith(t, criticalSettings, "a")
	crit := criticalUnit("orders")
	s.m.report(s.nodes["a"], reportBoth(2, 1))
	s.round()
	if s.share("a") <= 0 || s.shareOf("a", crit) <= 0 {
		t.Fatalf("far from the limit: shares %d and %d, want both > 0", s.share("a"), s.shareOf("a", crit))
	}
	l := s.reg.Get("orders")
	held := l.Snapshot().InUse
	n, c := s.share("a"), s.shareOf("a", crit)
	s.m.report(s.nodes["a"], reportBoth(n, c)) // at both shares: past 75%
	if n+c < 15 {
		t.Fatalf("shares %d and %d: the test wants them at 15 together", n, c)
	}
	s.round()
	if n, c := s.share("a"), s.shareOf("a", crit); n != -1 || c != -1 {
		t.Fatalf("at 75%% of the limit: shares %d and %d, want both strict (-1)", n, c)
	}
	if f := s.layerFields("a"); f[StrictKey("orders")] != 100 || f[CriticalStrictKey("orders")] != 100 {
		t.Errorf("the strict layer %v: want both routes strict", f)
	}
	if in := l.Snapshot().InUse; in != held {
		t.Fatalf("%d permits in use right after the switch, want the %d held for the shares", in, held)
	}
	s.settle(map[string]int{"a": 0})
	if in := s.reg.Get("orders").Snapshot().InUse; in != 0 {
		t.Errorf("%d permits still held once a reported both shares drained", in)
	}
}

// TestStatsSplitByClass: Stats counts each class's share cluster apart
// (Normal, Critical), and its totals are their sums; the metrics export
// both (EachShares, EachSharesClass).
func TestStatsSplitByClass(t *testing.T) {
	s := newSizingMeshWith(t, criticalSettings, "a", "b")
	crit := criticalUnit("orders")
	s.m.report(s.nodes["a"], reportBoth(2, 3)) // a has both routes
	s.m.report(s.nodes["b"], report(1))        // b a normal route only
	s.round()
	want := func(u string) (c ClassStat) {
		s.m.mu.Lock()
		defer s.m.mu.Unlock()
		for _, n := range s.nodes {
			if sh := n.shares[u]; sh != nil && len(sh.held) > 0 {
				c.Envoys++
				c.Held += len(sh.held)
				c.Limit += sh.limit
				c.InFlight += n.inflight[sh.cluster]
			}
		}
		return c
	}
	wn, wc := want("orders"), want(crit)
	if wn.Envoys != 2 || wc.Envoys != 1 || wc.Held == 0 || wc.InFlight != 3 || wn.InFlight != 3 {
		t.Fatalf("the fixture: normal %+v, critical %+v; want 2 Envoys with normal shares (3 in flight), 1 with a critical one (3 in flight)", wn, wc)
	}
	st := s.m.Stats()
	if len(st) != 1 {
		t.Fatalf("stats %+v, want orders only", st)
	}
	got := st[0]
	if got.Normal != wn || got.Critical != wc {
		t.Errorf("normal %+v, critical %+v; want %+v, %+v", got.Normal, got.Critical, wn, wc)
	}
	if got.Envoys != 2 || got.Held != wn.Held+wc.Held || got.Limit != wn.Limit+wc.Limit || got.InFlight != wn.InFlight+wc.InFlight {
		t.Errorf("totals %+v, want 2 Envoys and the sums of %+v and %+v", got, wn, wc)
	}
	var classes []string
	s.m.EachSharesClass(func(dep string, p bulkhead.Priority, envoys, held, limit, inFlight int) {
		c := ClassStat{envoys, held, limit, inFlight}
		if w := map[bulkhead.Priority]ClassStat{bulkhead.Normal: wn, bulkhead.Critical: wc}[p]; dep != "orders" || c != w {
			t.Errorf("EachSharesClass(%s, %v) = %+v, want %+v", dep, p, c, w)
		}
		classes = append(classes, p.String())
	})
	if strings.Join(classes, ",") != "normal,critical" {
		t.Errorf("EachSharesClass classes %v, want normal then critical", classes)
	}
}

// TestSharesRequestsCounted: the Envoys' load reports count the requests
// their circuit breakers admitted (issued) and turned away (dropped), both
// classes, per bulkhead (bulkhead_shares_requests_total); a report of a
// cluster that is no share cluster counts for none.
func TestSharesRequestsCounted(t *testing.T) {
	s := newSizingMeshWith(t, criticalSettings, "a", "b")
	s.m.report(s.nodes["a"], []*endpointv3.ClusterStats{clusterStats(testCluster, 2, 100, 3), clusterStats(testCritical, 1, 10, 1)})
	s.m.report(s.nodes["b"], []*endpointv3.ClusterStats{clusterStats(testCluster, 1, 50, 0), clusterStats("other", 9, 900, 90)})
	var got [][3]any
	s.m.EachSharesRequests(func(dep string, admitted, overflowed uint64) { got = append(got, [3]any{dep, admitted, overflowed}) })
	if want := [][3]any{{"orders", uint64(160), uint64(4)}}; !slices.Equal(got, want) {
		t.Fatalf("EachSharesRequests = %v, want %v", got, want)
	}
}
