package main

import (
	"strings"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
)

// TestSharesGoals: the goals of shares from synthetic phases, met far
// from the limit and near it in one run, not met in another.
func TestSharesGoals(t *testing.T) {
	shared := func(p Phase, limit int, mode, share, checks float64) Phase {
		if p.Loop == "closed" {
			p.Conns = 32
		} else {
			p.Latency.MeanMs = 2 // 500 req/s x 2 ms: 1 in flight
		}
		p.Shares = &SharesFigures{Limit: limit, Mode: mode, Share: share, ChecksPerRequest: checks, ShareRoute: 1 - checks}
		p.Shares.Demand = demand(&p)
		return p
	}
	nearPhase := func(p Phase) Phase { p.Loop = LoopNear; return p }
	run := func(far, near, nearUs float64, nearMode float64, rejected int64) *Results {
		r := &Results{Configs: []ConfigInfo{{Name: Floor}, {Name: Bulkhead}, {Name: SharesFar}, {Name: SharesHalf}, {Name: SharesNear}, {Name: NearStrict}},
			Plan: Plan{Fractions: []float64{lagLoad}}}
		for round, v := range []struct{ floor, bulkhead float64 }{{10000, 5000}, {9000, 4600}, {11000, 5400}} {
			n := round + 1
			r.Phases = append(r.Phases,
				closedPhase(Floor, n, v.floor, 40), closedPhase(Bulkhead, n, 2*v.bulkhead, 100),
				shared(closedPhase(SharesFar, n, far*v.floor, 42), 1000, 1, 507, 0),
				shared(closedPhase(SharesHalf, n, far*v.floor, 42), 64, 1, 64, 0),
				nearPhase(shared(closedPhase(SharesNear, n, near*v.bulkhead, nearUs), 32, nearMode, 0, 1)),
				nearPhase(shared(closedPhase(NearStrict, n, v.bulkhead, 100), 32, 0, 0, 1)))
			fl := openPhase(Floor, n, lagLoad, 40, 100, 2, nil)
			sf := shared(openPhase(SharesFar, n, lagLoad, 43, 110, 2.1, nil), 1000, 1, 507, 0)
			sh := shared(openPhase(SharesHalf, n, lagLoad, 43, 110, 2.1, nil), 64, 1, 40, 0)
			sh.NonOK = rejected
			r.Phases = append(r.Phases, fl, sf, sh, openPhase(Bulkhead, n, lagLoad, 90, 300, 3, nil))
			// The first seconds from idle: 300 of 6000 requests 503 with
			// shares, none strict.
			sw := shared(closedPhase(SharesNear, n, 6000, 50), 32, 0, 0, 0.5)
			sw.Loop, sw.Seconds, sw.NonOK, sw.Shares.Overflows, sw.Shares.ToStrict = LoopNearSwitch, 6, 300, 300, 1
			st := shared(closedPhase(NearStrict, n, 6000, 50), 32, 0, 0, 1)
			st.Loop, st.Seconds = LoopNearSwitch, 6
			r.Phases = append(r.Phases, sw, st)
		}
		r.evaluate()
		return r
	}

	// Far from the limit 0.95x the floor's throughput and 43 / 40 =
	// 1.075x its Envoy CPU; near it, strict, 0.98x the strict twin's
	// throughput and 102 / 100 its Envoy CPU; 3 x 2 of 75000 requests
	// rejected at <= 50% of the limit (0.008%).
	r := run(0.95, 0.98, 102, 0, 2)
	checkGoals(t, goalsByName(r), []goalCase{
		{"Throughput with shares (auto) far from the limit, closed loop", "met", "0.95x (median 9500 [8550-10450] vs 10000 [9000-11000] req/s"},
		{"Envoy CPU per request with shares (auto) far from the limit", "met", "1.07x (43.0 [43.0-43.0] vs 40.0 [40.0-40.0] us per request"},
		{"Throughput with shares (auto) near the limit, closed loop", "met", "0.98x (median 4900 [4508-5292] vs 5000 [4600-5400] req/s)"},
		{"Envoy CPU per request with shares (auto) near the limit, closed loop", "met", "1.02x (102.0 [102.0-102.0] vs 100.0"},
		// Phases at <= 50%: SharesFar's and SharesHalf's closed loops
		// (32 of 1000, 32 of 64: 2 x 28500 requests) and open loops (6 x
		// 3000); SharesNear's near phase (32 of 32) apart, NearStrict's
		// (strict, no shares) left out.
		// 3 x 2 of SharesHalf's 37500 requests: 0.016%.
		{"Rejections with shares (auto) at <= 50% of the limit", "met",
			"bulkhead-shares 0.000% (0 of 37500), bulkhead-shares-half 0.016% (6 of 37500); all together 0.008% (6 of 75000 requests, 12 phases"},
	})
	g := goalsByName(r)["Rejections with shares (auto) at <= 50% of the limit"]
	for _, want := range []string{"worst phase bulkhead-shares-half, open loop 50% of common (500 req/s), round 1: 0.067% (2 of 3000) at 500 req/s, demand 1.0 of 64, share 40",
		"tightest share 64 for a demand of 32.0 (headroom 2.0x) in bulkhead-shares-half, closed loop, round 1"} {
		if !strings.Contains(g.Measured, want) {
			t.Errorf("rejections: %q lacks %q", g.Measured, want)
		}
	}
	if g := goalsByName(r)["The switch to strict permits near the limit, from idle"]; g.verdictText("met", "NOT met") != "reported" ||
		!strings.HasPrefix(g.Measured, "5.00 [5.00-5.00]% of the requests not 200 (bulkhead-near-strict: 0.00 [0.00-0.00]%); 200s 950 [950-950] vs 1000 [1000-1000] a second; share overflows 300") {
		t.Errorf("switch: %+v", g)
	}
	if !strings.Contains(g.Note, "above half the limit (6 phases, strict permits once switched): 2.752% (900 of 32700)") {
		t.Errorf("rejections: the phases near the limit not stated apart: %q", g.Note)
	}
	if g := goalsByName(r)["Throughput with shares (auto) far from the limit, closed loop"]; !strings.Contains(g.Note, "0.000 [0.000-0.000] Checks") {
		t.Errorf("throughput: no Checks per request in the note: %q", g.Note)
	}

	// Far: 0.85x the floor's throughput, 1.07x its Envoy CPU still; near:
	// still on shares (not strict) although as fast; 3 x 40 of
	// SharesHalf's 34500 requests rejected (0.348%), none of SharesFar's.
	r = run(0.85, 0.98, 120, 1, 40)
	checkGoals(t, goalsByName(r), []goalCase{
		{"Throughput with shares (auto) far from the limit, closed loop", "NOT met", "0.85x"},
		{"Envoy CPU per request with shares (auto) far from the limit", "met", "1.07x"},
		{"Throughput with shares (auto) near the limit, closed loop", "NOT met", "mode at each round's end: shares (1.00 Checks/req)"},
		{"Envoy CPU per request with shares (auto) near the limit, closed loop", "NOT met", "1.20x"},
		{"Rejections with shares (auto) at <= 50% of the limit", "NOT met", "bulkhead-shares-half 0.348% (120 of 34500); all together 0.174% (120 of 69000 requests"},
	})

	// Results.md has the shares section.
	var b strings.Builder
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	if md := b.String(); !strings.Contains(md, "## Shares") || !strings.Contains(md, "| near the limit (closed loop, 5ms upstream), round 1 | bulkhead-shares-near | 32 | 32.0 | shares | 0 |") {
		t.Errorf("results.md lacks the shares table:\n%s", md)
	}
}

// TestSharesGoalsNotMeasured: without the shares configurations' phases,
// every goal of shares says so rather than passing.
func TestSharesGoalsNotMeasured(t *testing.T) {
	r := &Results{Configs: []ConfigInfo{{Name: Floor}, {Name: Bulkhead}}, Plan: Plan{Fractions: []float64{lagLoad}},
		Phases: []Phase{closedPhase(Floor, 1, 9000, 40), closedPhase(Bulkhead, 1, 5000, 90), openPhase(Floor, 1, lagLoad, 40, 100, 2, nil)}}
	gs := r.sharesGoals()
	if len(gs) != 6 {
		t.Fatalf("%d goals, want 6", len(gs))
	}
	for _, g := range gs {
		if g.Met != nil || g.Measured != "" || g.verdictText("met", "NOT met") != "not measured" {
			t.Errorf("%s: %+v, want not measured", g.Name, g)
		}
	}
}

// TestSharesLimit: the shares configurations' limits against the closed
// loop's connections, and their daemons' configuration parses in mode auto.
func TestSharesLimit(t *testing.T) {
	for _, tt := range []struct {
		sidecar string
		want    int
	}{{sidecarSharesFar, limit}, {sidecarSharesHalf, 64}, {sidecarSharesNear, 32}, {sidecarNearStrict, 32}, {sidecarDaemon, 0}} {
		if got := sharesLimit(tt.sidecar, 32); got != tt.want {
			t.Errorf("sharesLimit(%s, 32) = %d, want %d", tt.sidecar, got, tt.want)
		}
		if tt.want == 0 {
			continue
		}
		cfg, err := config.Parse("bench.yaml", []byte(daemonConfig(tt.sidecar, "", 32)))
		if err != nil {
			t.Fatalf("%s: %v", tt.sidecar, err)
		}
		mode, cluster := shares.Auto, shareCluster
		if tt.sidecar == sidecarNearStrict {
			mode, cluster = shares.Strict, ""
		}
		if b := cfg.Bulkheads[routeName]; b.Settings.MaxConcurrent != tt.want || b.Shares.Mode != mode || b.Shares.Cluster != cluster {
			t.Errorf("%s: bulkhead %+v, want max_concurrent %d in mode %v on %q", tt.sidecar, b, tt.want, mode, cluster)
		}
	}
}
