package main

import (
	"strings"
	"testing"
)

func TestSpreadOf(t *testing.T) {
	tests := []struct {
		name  string
		v     []float64
		want  Spread
		width float64
		text  string
	}{
		{"none", nil, Spread{}, 0, "0"},
		{"one round", []float64{7000}, Spread{Rounds: 1, Median: 7000, Min: 7000, Max: 7000}, 0, "7000"},
		{"odd: the middle one", []float64{9000, 6000, 7000}, Spread{Rounds: 3, Median: 7000, Min: 6000, Max: 9000}, 3.0 / 7, "7000 [6000-9000]"},
		{"even: the mean of the middle two", []float64{100, 400, 200, 300}, Spread{Rounds: 4, Median: 250, Min: 100, Max: 400}, 1.2, "250 [100-400]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := spreadOf(tt.v)
			if got != tt.want {
				t.Fatalf("spreadOf = %+v, want %+v", got, tt.want)
			}
			if w := got.Width(); w < tt.width-1e-9 || w > tt.width+1e-9 {
				t.Errorf("Width = %v, want %v", w, tt.width)
			}
			if s := got.format("%.0f"); s != tt.text {
				t.Errorf("format = %q, want %q", s, tt.text)
			}
		})
	}
}

// closedPhase is a closed-loop round of config.
func closedPhase(config string, round int, rps, envoyUs float64) Phase {
	return Phase{Loop: "closed", Config: config, Round: round, RPS: rps, Requests: int64(rps),
		CPU: map[string]CPUUse{"envoy": {UsPerRequest: envoyUs, MsPer1k: envoyUs}}}
}

// openPhase is an open-loop round of config at fraction f of the common
// maximum: Envoy's CPU per request, all processes' (ms per 1k), the
// release lag's p99 and share within 2 ms (a bulkhead: lag != nil).
func openPhase(config string, round int, f, envoyUs, allUs, p99 float64, lag *ReleaseLag) Phase {
	return Phase{Loop: "open", Config: config, Round: round, Base: BaseCommon, Fraction: f, TargetRPS: 1000 * f,
		RPS: 1000 * f, Requests: 3000, Latency: Summary{N: 3000, P99Ms: p99},
		CPU: map[string]CPUUse{"envoy": {UsPerRequest: envoyUs, MsPer1k: envoyUs}, "harness": {MsPer1k: allUs - envoyUs}},
		Lag: lag}
}

func TestRoundRatios(t *testing.T) {
	a := []*Phase{{Round: 1, RPS: 90, Requests: 1}, {Round: 2, RPS: 80, Requests: 1}, {Round: 3, RPS: 99, Requests: 1}}
	// No round 3 for b, and its round 2 served nothing: one ratio only... and round 4 has no a.
	b := []*Phase{{Round: 1, RPS: 100, Requests: 1}, {Round: 2, RPS: 0, Requests: 0}, {Round: 4, RPS: 50, Requests: 1}}
	if got := roundRatios(a, b, rps); got != (Spread{Rounds: 1, Median: 0.9, Min: 0.9, Max: 0.9}) {
		t.Fatalf("roundRatios = %+v", got)
	}
	b = append(b, &Phase{Round: 3, RPS: 110, Requests: 1})
	if got := roundRatios(a, b, rps); got.Rounds != 2 || got.Min != 0.9 || got.Max != 0.9 {
		t.Fatalf("roundRatios = %+v, want 0.9 twice", got)
	}
}

func TestMedianPhase(t *testing.T) {
	rounds := []*Phase{{Round: 1, RPS: 30}, {Round: 2, RPS: 10}, {Round: 3, RPS: 40}, {Round: 4, RPS: 20}}
	// Even: the lower of the middle two (20), a round that happened.
	if got := medianPhase(rounds, func(p *Phase) float64 { return p.RPS }); got.Round != 4 {
		t.Fatalf("medianPhase = round %d, want 4", got.Round)
	}
	if rounds[0].Round != 1 || rounds[1].Round != 2 {
		t.Fatal("medianPhase reordered its argument")
	}
	if medianPhase(nil, func(p *Phase) float64 { return p.RPS }) != nil {
		t.Fatal("no rounds: want nil")
	}
}

// TestGoalsFromTheMedian: a run whose best rounds meet the throughput goal
// and whose medians do not is judged by its medians, and says so.
func TestGoalsFromTheMedian(t *testing.T) {
	lag := func(p99, in2 float64) *ReleaseLag {
		return &ReleaseLag{Releases: 3000, P99Ms: p99, Within2ms: in2, MeanLagMs: 0.5}
	}
	r := &Results{
		Configs: []ConfigInfo{{Name: Floor}, {Name: Noop}, {Name: Bulkhead}},
		Plan:    Plan{Fractions: []float64{0.5, 0.75}},
		Phases: []Phase{
			closedPhase(Floor, 1, 30000, 90), closedPhase(Floor, 2, 31000, 90), closedPhase(Floor, 3, 29000, 90),
			// The no-op hop: 7,000 [6,900-7,100]; its best round 7,100.
			closedPhase(Noop, 1, 7000, 190), closedPhase(Noop, 2, 6900, 190), closedPhase(Noop, 3, 7100, 190),
			// The bulkhead: 6,000 [5,500-7,000]; its best round 7,000 (0.99x the no-op's best).
			closedPhase(Bulkhead, 1, 6000, 220), closedPhase(Bulkhead, 2, 7000, 210), closedPhase(Bulkhead, 3, 5500, 230),
			// 50%: Envoy 200 [190-260] vs 190 [180-200] us: 1.05x, met at the bound.
			openPhase(Noop, 1, 0.5, 190, 300, 2, nil), openPhase(Noop, 2, 0.5, 180, 300, 2, nil), openPhase(Noop, 3, 0.5, 200, 300, 2, nil),
			openPhase(Bulkhead, 1, 0.5, 199.5, 330, 3, lag(1.5, 0.995)), openPhase(Bulkhead, 2, 0.5, 260, 400, 9, lag(4.0, 0.95)),
			openPhase(Bulkhead, 3, 0.5, 190, 320, 2, lag(1.9, 0.992)),
			// 75%: all processes 300 vs 330 us: 0.91x.
			openPhase(Noop, 1, 0.75, 190, 300, 2, nil), openPhase(Bulkhead, 1, 0.75, 200, 330, 3, lag(1, 1)),
		},
	}
	r.evaluate()
	goal := func(prefix string) Goal {
		t.Helper()
		for _, g := range r.Goals {
			if strings.HasPrefix(g.Name, prefix) {
				return g
			}
		}
		t.Fatalf("no goal %q in %+v", prefix, r.Goals)
		return Goal{}
	}
	g := goal("Throughput with the bulkhead, closed loop")
	if g.Met == nil || *g.Met {
		t.Errorf("throughput: met = %v, want not met (median 0.86x; only the best rounds reach 0.99x)", g.Met)
	}
	for _, want := range []string{"0.86x", "6000 [5500-7000] vs 7000 [6900-7100]", "best rounds 0.99x", "round by round 0.86x [0.77x-1.01x]"} {
		if !strings.Contains(g.Measured, want) {
			t.Errorf("throughput: measured %q, want %q in it", g.Measured, want)
		}
	}
	if !strings.Contains(g.Note, "rounds spread over 5% (bulkhead 25%)") {
		t.Errorf("throughput: note %q, want the bulkhead's spread flagged, not the no-op's", g.Note)
	}

	g = goal("Envoy CPU per request")
	if g.Met == nil || !*g.Met || !strings.Contains(g.Measured, "1.05x (199.5 [190.0-260.0] vs 190.0 [180.0-200.0] us") {
		t.Errorf("Envoy CPU: %+v", g)
	}
	if !strings.Contains(g.Note, "closed loop (saturation) 1.16x") {
		t.Errorf("Envoy CPU: note %q, want the closed loop's medians (220 vs 190)", g.Note)
	}

	g = goal("Throughput with the bulkhead, from CPU")
	if g.Met == nil || *g.Met || !strings.Contains(g.Measured, "0.91x (330 vs 300 us") {
		t.Errorf("CPU throughput: %+v", g)
	}

	g = goal("Release lag p99")
	if g.Met == nil || !*g.Met || !strings.Contains(g.Measured, "p99 ~1.900 [1.500-4.000] ms") ||
		!strings.Contains(g.Measured, "99.2 [95.0-99.5]% of lags <= 2 ms") {
		t.Errorf("release lag: %+v", g)
	}

	if len(r.Closed) != 3 || r.Closed[2].Config != Bulkhead || r.Closed[2].Median != 6000 || r.Closed[2].Max != 7000 ||
		len(r.Closed[2].ByRound) != 3 || r.Closed[2].ByRound[1] != 7000 {
		t.Errorf("Closed = %+v", r.Closed)
	}
	if p := r.medianClosedPhase(Bulkhead); p == nil || p.Round != 1 {
		t.Errorf("median closed round = %+v, want round 1", p)
	}
	if r.bestClosed(Bulkhead) != 7000 || r.medianClosed(Bulkhead) != 6000 {
		t.Errorf("best %v, median %v", r.bestClosed(Bulkhead), r.medianClosed(Bulkhead))
	}

	var md strings.Builder
	if err := writeMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| bulkhead | 6000, 7000, 5500 | 6000 | 5500-7000 | 25.0% | 7000 | 0.20x | 0.86x |") {
		t.Errorf("closed-loop table: the bulkhead's row is not its median with the best beside it:\n%s", md.String())
	}
}

func TestSidecarTraffic(t *testing.T) {
	before := map[string]uint64{"cluster.bulkhead.upstream_cx_tx_bytes_total": 1000, "cluster.bulkhead.upstream_cx_rx_bytes_total": 500,
		"cluster.bulkhead.upstream_rq_total": 10, "access_logs.grpc_access_log.logs_written": 10}
	after := map[string]uint64{"cluster.bulkhead.upstream_cx_tx_bytes_total": 901000, "cluster.bulkhead.upstream_cx_rx_bytes_total": 300500,
		"cluster.bulkhead.upstream_rq_total": 1012, "access_logs.grpc_access_log.logs_written": 1010, "access_logs.grpc_access_log.logs_dropped": 3}
	got := sidecarTraffic("bulkhead", before, after, 1000)
	want := SidecarTraffic{TxBytes: 900, RxBytes: 300, Requests: 1.002, LogsWritten: 1, LogsDropped: 3}
	if got == nil || *got != want {
		t.Fatalf("sidecarTraffic = %+v, want %+v", got, want)
	}
	for _, c := range []struct {
		cluster       string
		before, after map[string]uint64
		requests      int64
	}{{"", before, after, 1000}, {"bulkhead", nil, after, 1000}, {"bulkhead", before, after, 0}} {
		if got := sidecarTraffic(c.cluster, c.before, c.after, c.requests); got != nil {
			t.Errorf("sidecarTraffic(%q, ...) = %+v, want nil", c.cluster, got)
		}
	}
}
