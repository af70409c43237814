package main

import (
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/redisproc"
)

// TestLeaseGoals: each goal of the capacity leases met with one replica
// and not met with two, from synthetic phases.
func TestLeaseGoals(t *testing.T) {
	ledger := func(acquire, release, lease, scripts, cpuMsPer1k float64) *LedgerCost {
		return &LedgerCost{Replicas: 1,
			PerRequest:     map[string]float64{"acquire": acquire, "release": release, "renew": 0, "leave": 0, "reopen": 0, "lease": lease},
			TicksPerSecond: map[string]float64{"state": 1, "replicas": 1, "lease": 1.5}, ScriptsPerRequest: scripts,
			ScriptUsPerRequest: 0.25, CPUMsPer1k: cpuMsPer1k}
	}
	// Each bare redis-server used 2 ms of CPU a second on its own.
	floor := &redisproc.Floor{Window: 3 * time.Second, CPU: 6 * time.Millisecond}
	r := &Results{Configs: []ConfigInfo{{Name: Bulkhead}, {Name: RedisLeases, RedisIdleFloor: floor},
		{Name: RedisLeasesTwo, RedisIdleFloor: floor}}, Plan: Plan{Fractions: []float64{lagLoad}}}
	for round, v := range []struct{ mem, one, two, p99mem, p99one, daemonOne float64 }{
		{7000, 6900, 5000, 2, 2.2, 52}, {6000, 5900, 4000, 3, 3.1, 49}, {6500, 6300, 4500, 2.5, 2.7, 53},
	} {
		r.Phases = append(r.Phases, closedPhase(Bulkhead, round+1, v.mem, 90), closedPhase(RedisLeases, round+1, v.one, 90),
			closedPhase(RedisLeasesTwo, round+1, v.two, 90))
		mem := openPhase(Bulkhead, round+1, lagLoad, 300, 500, v.p99mem, nil)
		mem.CPU["sidecar"] = CPUUse{UsPerRequest: 50}
		// One replica: 0.004 calls per request, 2 ms of Redis CPU per
		// 1,000 (1.3 us per request, 0.8 above the idle floor: judged on
		// that), its daemon's CPU 1.04x: every goal met.
		one := openPhase(RedisLeases, round+1, lagLoad, 300, 500, v.p99one, nil)
		one.Ledger = ledger(0.001, 0.001, 0.002, 0.002, 2)
		one.CPU["sidecar"], one.CPU["redis"] = CPUUse{UsPerRequest: v.daemonOne}, CPUUse{UsPerRequest: 1.3, UsAboveIdle: ptr(0.8)}
		// Two replicas: half the requests on the per-request path, Redis
		// at 40 ms per 1,000 (30 us per request, 29.5 above the floor),
		// the daemons' CPU 1.6x, p99 +1.5 ms: none met.
		two := openPhase(RedisLeasesTwo, round+1, lagLoad, 300, 500, 4, nil)
		two.Ledger = ledger(0.5, 0.5, 0.004, 1, 40)
		two.CPU["sidecar"], two.CPU["redis"] = CPUUse{UsPerRequest: 80}, CPUUse{UsPerRequest: 30, UsAboveIdle: ptr(29.5)}
		two.NonOK = 3
		r.Phases = append(r.Phases, mem, one, two)
	}
	r.evaluate()
	goals := goalsByName(r)
	checkGoals(t, goals, []goalCase{
		// 6300 / 6500 = 0.97x: met; 4500 / 6500 = 0.69x: not.
		{"Throughput with capacity leases, one replica, closed loop", "met", "0.97x (median 6300 [5900-6900] vs 6500 [6000-7000] req/s"},
		{"Throughput with capacity leases, two replicas, closed loop", "NOT met", "0.69x"},
		// Rounds of median p99: 2.7 vs 2.5 ms.
		{"Added p99 over the in-memory bulkhead with capacity leases, one replica, 50% of the common maximum", "met",
			"+0.200 ms (p99 2.700 vs 2.500 ms"},
		{"Added p99 over the in-memory bulkhead with capacity leases, two replicas, 50% of the common maximum", "NOT met", "+1.500 ms"},
		{"Redis calls per request with capacity leases, one replica, 50% of the common maximum", "met",
			"0.0040 [0.0040-0.0040] calls per request (daemons: 0.0010 [0.0010-0.0010] acquire + 0.0010 [0.0010-0.0010] release + " +
				"0.0000 [0.0000-0.0000] renew/leave/reopen + 0.0020 [0.0020-0.0020] lease); Redis: 0.0040 [0.0040-0.0040] scripts"},
		{"Redis calls per request with capacity leases, two replicas, 50% of the common maximum", "NOT met", "1.0040 [1.0040-1.0040] calls per request"},
		{"Redis CPU per 1,000 requests with capacity leases, one replica, 50% of the common maximum", "met", "2.00 [2.00-2.00] ms (INFO)"},
		{"Redis CPU per 1,000 requests with capacity leases, two replicas, 50% of the common maximum", "NOT met", "40.00 [40.00-40.00] ms (INFO)"},
		// Daemon CPU: 52 / 50 = 1.04x; 80 / 50 = 1.6x.
		{"Daemon CPU per request with capacity leases, one replica, 50% of the common maximum", "met", "1.04x (52.0 [49.0-53.0] vs 50.0"},
		{"Daemon CPU per request with capacity leases, two replicas, 50% of the common maximum", "NOT met", "1.60x"},
		{"Redis CPU per request with capacity leases, one replica, 50% of the common maximum", "met",
			"0.80 [0.80-0.80] us per request above the idle floor (judged); 1.30 [1.30-1.30] us per request in all, of which running " +
				"scripts 0.25 [0.25-0.25] us (commandstats); the floor: 2.00 ms a second, over 3.0 s before any daemon connected"},
		{"Redis CPU per request with capacity leases, two replicas, 50% of the common maximum", "NOT met",
			"29.50 [29.50-29.50] us per request above the idle floor (judged); 30.00 [30.00-30.00] us per request in all"},
	})
	if g := goals["Redis calls per request with capacity leases, one replica, 50% of the common maximum"]; !strings.Contains(g.Measured,
		"ticks apart: 1.50 [1.50-1.50] lease + 1.00 [1.00-1.00] state + 1.00 [1.00-1.00] replicas calls per second") {
		t.Errorf("ticks: %q", g.Measured)
	}
	if g := goals["Redis calls per request with capacity leases, two replicas, 50% of the common maximum"]; !strings.Contains(g.Note,
		"requests without a 200") {
		t.Errorf("no note of the requests not admitted: %q", g.Note)
	}
	// The per-request goals of the Redis ledger do not take the leases'
	// configurations for theirs.
	if g := goals["Throughput on the Redis ledger, one replica, closed loop"]; g.Met != nil || g.Measured != "" {
		t.Errorf("the Redis ledger's goal measured from the leases': %+v", g)
	}
	// The Redis section shows the leases' calls, per request and per second.
	var b strings.Builder
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{"| lease / req |", "| lease / s |", "| lease call ms |",
		"| bulkhead-redis-leases | 0.0010 | 0.0010 | 0.0000 | 0.0020 | 0 | 1.00 | 1.00 | 1.50 |",
		"| Redis us / req (threads) | Redis us / req above idle floor | Redis cores |", "| 1.3 | 0.80 | 0.000 |",
		"Idle floors (CPU a second of each bare redis-server, INFO used_cpu_sys+user): bulkhead-redis-leases 2.00 ms/s over 3.0 s, " +
			"bulkhead-redis-leases-2 2.00 ms/s over 3.0 s."} {
		if !strings.Contains(md, want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
}

// TestLeaseGoalsNotMeasured: without the configurations' phases, every
// goal of the capacity leases says so rather than passing.
func TestLeaseGoalsNotMeasured(t *testing.T) {
	r := &Results{Configs: []ConfigInfo{{Name: Bulkhead}}, Plan: Plan{Fractions: []float64{lagLoad}},
		Phases: []Phase{closedPhase(Bulkhead, 1, 7000, 90), openPhase(Bulkhead, 1, lagLoad, 300, 500, 2, nil)}}
	gs := r.leaseGoals()
	if len(gs) != 13 {
		t.Fatalf("%d goals, want 6 per configuration and the one at the limit", len(gs))
	}
	for _, g := range gs {
		if g.Met != nil || g.Measured != "" || g.verdictText("met", "NOT met") != "not measured" {
			t.Errorf("%s: %+v, want not measured", g.Name, g)
		}
	}
}

// TestLeaseNearGoal: at the limit, two replicas with leases against the
// per-request path's 1 acquire + 1 release; the per-request path's own
// figure and the throughputs beside it.
func TestLeaseNearGoal(t *testing.T) {
	near := func(config string, round int, rps float64, perRequest map[string]float64) Phase {
		return Phase{Loop: LoopNear, Config: config, Round: round, RPS: rps, Requests: int64(3 * rps),
			Ledger: &LedgerCost{Replicas: 2, PerRequest: perRequest}}
	}
	for _, tt := range []struct {
		name   string
		leases map[string]float64
		met    string
		want   string
	}{
		{"leases shrunk to use", map[string]float64{"acquire": 0.9, "release": 0.9, "renew": 0, "leave": 0.01, "reopen": 0, "lease": 0.01},
			"met", "1.820 [1.820-1.820] calls per request (daemons: 0.900 [0.900-0.900] acquire + 0.900 [0.900-0.900] release + " +
				"0.010 [0.010-0.010] renew/leave/reopen + 0.010 [0.010-0.010] lease)"},
		{"more than the per-request path", map[string]float64{"acquire": 1, "release": 1, "leave": 0.2, "lease": 0.1},
			"NOT met", "2.300 [2.300-2.300] calls per request"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &Results{Configs: []ConfigInfo{{Name: NearStrict}, {Name: RedisTwoNear}, {Name: RedisLeasesTwoNear}}}
			for round := 1; round <= 3; round++ {
				r.Phases = append(r.Phases, Phase{Loop: LoopNear, Config: NearStrict, Round: round, RPS: 3000, Requests: 9000},
					near(RedisTwoNear, round, 2000, map[string]float64{"acquire": 1, "release": 1, "leave": 0.002}),
					near(RedisLeasesTwoNear, round, 2500, tt.leases))
			}
			g := r.leaseNearGoal()
			if got := g.verdictText("met", "NOT met"); got != tt.met || !strings.Contains(g.Measured, tt.want) {
				t.Fatalf("%s: %s %q, want %s %q", g.Name, got, g.Measured, tt.met, tt.want)
			}
			for _, want := range []string{"(bulkhead-redis-2-near): 2.002 [2.002-2.002] calls per request (1.000 [1.000-1.000] acquire",
				"req/s: bulkhead-redis-leases-2-near 2500 [2500-2500], bulkhead-redis-2-near 2000 [2000-2000], bulkhead-near-strict 3000 [3000-3000]"} {
				if !strings.Contains(g.Note, want) {
					t.Errorf("note %q lacks %q", g.Note, want)
				}
			}
		})
	}
	if g := (&Results{}).leaseNearGoal(); g.Met != nil || g.Measured != "" {
		t.Errorf("without the near phase: %+v, want not measured", g)
	}
}

func ptr(v float64) *float64 { return &v }

// TestLeaseRedisUsGoalWithoutFloor: a results.json from before the idle
// floor was measured is judged on Redis's whole CPU per request, and says
// so.
func TestLeaseRedisUsGoalWithoutFloor(t *testing.T) {
	for _, tt := range []struct {
		us            float64
		verdict, want string
	}{{0.9, "met", "0.90 us per request in all"}, {1.3, "NOT met", "1.30 us per request in all"}} {
		ph := openPhase(RedisLeases, 1, lagLoad, 300, 500, 2, nil)
		ph.Ledger, ph.CPU["redis"] = &LedgerCost{ScriptUsPerRequest: 0.25}, CPUUse{UsPerRequest: tt.us}
		r := &Results{Configs: []ConfigInfo{{Name: RedisLeases}}, Plan: Plan{Fractions: []float64{lagLoad}}, Phases: []Phase{ph}}
		g := r.leaseRedisUsGoal(RedisLeases, "one replica")
		if got := g.verdictText("met", "NOT met"); got != tt.verdict || !strings.HasPrefix(g.Measured, tt.want) ||
			!strings.Contains(g.Note, "no idle floor measured") {
			t.Errorf("%.1f us: %s %q (%s), want %s %q", tt.us, got, g.Measured, g.Note, tt.verdict, tt.want)
		}
	}
}

// TestUsAboveIdle: a window's CPU less the floor's rate over it, per
// request.
func TestUsAboveIdle(t *testing.T) {
	floor := &redisproc.Floor{Window: 3 * time.Second, CPU: 6 * time.Millisecond}
	for _, tt := range []struct {
		name     string
		floor    *redisproc.Floor
		cpu      time.Duration
		requests int64
		want     *float64
	}{
		// 30 ms over 3 s, 6 of them the floor's: 24 ms over 10,000 requests.
		{"above the floor", floor, 30 * time.Millisecond, 10000, ptr(2.4)},
		{"below the floor", floor, 3 * time.Millisecond, 1000, ptr(-3)},
		{"no floor", nil, 30 * time.Millisecond, 10000, nil},
		{"no requests", floor, 30 * time.Millisecond, 0, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := usAboveIdle(tt.floor, tt.cpu, 3*time.Second, tt.requests)
			if (got == nil) != (tt.want == nil) || got != nil && *got != *tt.want {
				t.Errorf("usAboveIdle = %v, want %v", deref(got), deref(tt.want))
			}
		})
	}
}

func deref(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}
