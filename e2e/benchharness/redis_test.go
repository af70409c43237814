package main

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/redisproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// ledgerMetrics is one replica's /metrics with its ledger calls by op
// (result ok) and failed calls (result timeout, op acquire).
func ledgerMetrics(t *testing.T, ok map[string]float64, failed float64) *testbed.Metrics {
	t.Helper()
	var b strings.Builder
	b.WriteString("# TYPE bulkhead_ledger_calls_total counter\n")
	for op, v := range ok {
		b.WriteString("bulkhead_ledger_calls_total{op=\"" + op + "\",result=\"ok\"} " + ftoa(v) + "\n")
	}
	b.WriteString("bulkhead_ledger_calls_total{op=\"acquire\",result=\"timeout\"} " + ftoa(failed) + "\n")
	for op, v := range ok {
		// Each call took 0.5 ms.
		b.WriteString("bulkhead_ledger_call_seconds_sum{op=\"" + op + "\"} " + ftoa(v*0.0005) + "\n")
		b.WriteString("bulkhead_ledger_call_seconds_count{op=\"" + op + "\"} " + ftoa(v) + "\n")
	}
	m, err := testbed.ParseMetrics(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLedgerCost(t *testing.T) {
	at := time.Unix(1000, 0)
	// Two replicas; in the window (2 s, 1,000 requests): 1,000 acquires,
	// 1,000 releases and 10 renewals over the two (2 acquires timed out:
	// counted too); each replica ticks twice
	// (state and replicas); Redis ran 2,018 scripts (8 the ticks'), 21,000
	// commands inside them, and used 100 ms of CPU.
	before := reading{at: at, replicas: []*testbed.Metrics{
		ledgerMetrics(t, map[string]float64{"acquire": 100, "release": 100, "state": 5, "replicas": 5}, 1),
		ledgerMetrics(t, map[string]float64{"acquire": 50, "release": 50, "state": 5, "replicas": 5}, 0),
	}, redis: &redisproc.Info{Calls: map[string]int64{"evalsha": 500, "hset": 4000, "info": 7},
		Usec: map[string]int64{"evalsha": 10000, "hset": 999}, CPU: time.Second}}
	after := reading{at: at.Add(2 * time.Second), replicas: []*testbed.Metrics{
		ledgerMetrics(t, map[string]float64{"acquire": 698, "release": 600, "renew": 10, "state": 7, "replicas": 7}, 3),
		ledgerMetrics(t, map[string]float64{"acquire": 450, "release": 550, "state": 7, "replicas": 7}, 0),
	}, redis: &redisproc.Info{Calls: map[string]int64{"evalsha": 2500, "eval": 18, "hset": 25000, "info": 8, "ping": 1},
		Usec: map[string]int64{"evalsha": 45000, "eval": 5000, "hset": 99999}, CPU: 1100 * time.Millisecond}}
	before.ledger, after.ledger = sumLedgerCalls(before.replicas), sumLedgerCalls(after.replicas)
	c := ledgerCost(2, before, after, 1000)
	if c == nil {
		t.Fatal("ledgerCost = nil")
	}
	want := map[string]float64{"acquire": 1, "release": 1, "renew": 0.01, "leave": 0, "reopen": 0}
	if !maps.Equal(c.PerRequest, want) {
		t.Errorf("PerRequest = %v, want %v", c.PerRequest, want)
	}
	if w := map[string]float64{"state": 2, "replicas": 2}; !maps.Equal(c.TicksPerSecond, w) {
		t.Errorf("TicksPerSecond = %v, want %v", c.TicksPerSecond, w)
	}
	if c.CallMs["acquire"] != 0.5 || c.CallMs["release"] != 0.5 || c.CallMs["state"] != 0.5 || len(c.CallMs) != 5 {
		t.Errorf("CallMs = %v, want 0.5 for acquire, release, renew, state and replicas", c.CallMs)
	}
	if c.Failed != 2 || c.TickScripts != 8 || c.EvalCalls != 18 {
		t.Errorf("Failed, TickScripts, EvalCalls = %d, %d, %d; want 2, 8, 18", c.Failed, c.TickScripts, c.EvalCalls)
	}
	if c.ScriptsPerRequest != 2.01 || c.InScriptsPerRequest != 21 || c.CPUMsPer1k != 100 || c.ScriptUsPerRequest != 40 {
		t.Errorf("ScriptsPerRequest, InScriptsPerRequest, CPUMsPer1k, ScriptUsPerRequest = %v, %v, %v, %v; want 2.01, 21, 100, 40",
			c.ScriptsPerRequest, c.InScriptsPerRequest, c.CPUMsPer1k, c.ScriptUsPerRequest)
	}
	if w := map[string]int64{"evalsha": 2000, "eval": 18, "hset": 21000, "info": 1, "ping": 1}; !maps.Equal(c.Commands, w) {
		t.Errorf("Commands = %v, want %v", c.Commands, w)
	}
	for name, args := range map[string][2]reading{
		"no INFO":          {{at: at, ledger: before.ledger}, after},
		"no ledger counts": {before, {at: after.at, redis: after.redis}},
		"no time":          {before, {at: at, ledger: after.ledger, redis: after.redis}},
	} {
		if c := ledgerCost(2, args[0], args[1], 1000); c != nil {
			t.Errorf("%s: ledgerCost = %+v, want nil", name, c)
		}
	}
	if c := ledgerCost(2, before, after, 0); c != nil {
		t.Errorf("no requests: ledgerCost = %+v, want nil", c)
	}
}

// TestLedgerCostLeases: the capacity leases' calls are ticks, per second,
// and counted per request too; their scripts are the ticks'.
func TestLedgerCostLeases(t *testing.T) {
	at := time.Unix(1000, 0)
	// One replica; in the window (2 s, 10,000 requests): 3 acquires and 3
	// releases (the lease had no room), 2 state, 2 replicas and 4 lease
	// calls; Redis ran 14 scripts (8 the ticks').
	before := reading{at: at, replicas: []*testbed.Metrics{
		ledgerMetrics(t, map[string]float64{"acquire": 10, "release": 10, "state": 5, "replicas": 5, "lease": 6}, 0),
	}, redis: &redisproc.Info{Calls: map[string]int64{"evalsha": 36}, Usec: map[string]int64{}, CPU: time.Second}}
	after := reading{at: at.Add(2 * time.Second), replicas: []*testbed.Metrics{
		ledgerMetrics(t, map[string]float64{"acquire": 13, "release": 13, "state": 7, "replicas": 7, "lease": 10}, 0),
	}, redis: &redisproc.Info{Calls: map[string]int64{"evalsha": 50}, Usec: map[string]int64{}, CPU: 1010 * time.Millisecond}}
	before.ledger, after.ledger = sumLedgerCalls(before.replicas), sumLedgerCalls(after.replicas)
	c := ledgerCost(1, before, after, 10000)
	if c == nil {
		t.Fatal("ledgerCost = nil")
	}
	want := map[string]float64{"acquire": 0.0003, "release": 0.0003, "renew": 0, "leave": 0, "reopen": 0, "lease": 0.0004}
	if !maps.Equal(c.PerRequest, want) {
		t.Errorf("PerRequest = %v, want %v", c.PerRequest, want)
	}
	if w := map[string]float64{"state": 1, "replicas": 1, "lease": 2}; !maps.Equal(c.TicksPerSecond, w) {
		t.Errorf("TicksPerSecond = %v, want %v", c.TicksPerSecond, w)
	}
	if c.TickScripts != 8 || c.ScriptsPerRequest != 0.0006 || c.CPUMsPer1k != 1 {
		t.Errorf("TickScripts, ScriptsPerRequest, CPUMsPer1k = %d, %v, %v; want 8, 0.0006, 1", c.TickScripts, c.ScriptsPerRequest, c.CPUMsPer1k)
	}
}

func TestRoundDiffs(t *testing.T) {
	a := []*Phase{{Round: 1, Latency: Summary{N: 1, P99Ms: 3}}, {Round: 2, Latency: Summary{N: 1, P99Ms: 2.5}},
		{Round: 3, Latency: Summary{N: 1, P99Ms: 9}}}
	// No round 3 for b; its round 4 has no a; its round 2 measured nothing.
	b := []*Phase{{Round: 1, Latency: Summary{N: 1, P99Ms: 2}}, {Round: 2}, {Round: 4, Latency: Summary{N: 1, P99Ms: 1}}}
	if got := roundDiffs(a, b, p99); got != (Spread{Rounds: 1, Median: 1, Min: 1, Max: 1}) {
		t.Fatalf("roundDiffs = %+v", got)
	}
	b[1] = &Phase{Round: 2, Latency: Summary{N: 1, P99Ms: 3}}
	b = append(b, &Phase{Round: 3, Latency: Summary{N: 1, P99Ms: 4}})
	if got := roundDiffs(a, b, p99); got != (Spread{Rounds: 3, Median: 1, Min: -0.5, Max: 5}) {
		t.Fatalf("roundDiffs = %+v", got)
	}
}

func TestRedisGoals(t *testing.T) {
	ledger := func(acquire, release, scripts float64) *LedgerCost {
		return &LedgerCost{Replicas: 1, PerRequest: map[string]float64{"acquire": acquire, "release": release},
			TicksPerSecond: map[string]float64{"state": 1, "replicas": 1}, ScriptsPerRequest: scripts, InScriptsPerRequest: 21,
			CPUMsPer1k: 110}
	}
	r := &Results{Configs: []ConfigInfo{{Name: Bulkhead}, {Name: RedisOne}, {Name: RedisTwo}}, Plan: Plan{Fractions: []float64{lagLoad}}}
	for round, v := range []struct{ mem, one, two, p99mem, p99one float64 }{
		{7000, 6000, 3000, 2, 2.5}, {6000, 5000, 2000, 3, 5}, {6500, 5400, 2500, 2.5, 3},
	} {
		r.Phases = append(r.Phases, closedPhase(Bulkhead, round+1, v.mem, 90), closedPhase(RedisOne, round+1, v.one, 90),
			closedPhase(RedisTwo, round+1, v.two, 90))
		mem, one := openPhase(Bulkhead, round+1, lagLoad, 300, 500, v.p99mem, nil), openPhase(RedisOne, round+1, lagLoad, 300, 500, v.p99one, nil)
		one.Ledger, one.CPU["redis"] = ledger(1.01, 0.99, 2.01), CPUUse{UsPerRequest: 105, MsPer1k: 100}
		two := openPhase(RedisTwo, round+1, lagLoad, 300, 500, 30, nil)
		two.Ledger = ledger(1, 1.2, 2.2) // releases twice over: not met
		r.Phases = append(r.Phases, mem, one, two)
	}
	r.evaluate()
	goals := goalsByName(r)
	checkGoals(t, goals, []goalCase{
		// 5400 / 6500 = 0.83x: met; 2500 / 6500 = 0.38x: not.
		{"Throughput on the Redis ledger, one replica, closed loop", "met", "0.83x (median 5400 [5000-6000] vs 6500 [6000-7000] req/s"},
		{"Throughput on the Redis ledger, two replicas, closed loop", "NOT met", "0.38x"},
		{"Redis calls per request, one replica, 50% of the common maximum", "met", "1.010 [1.010-1.010] acquire + 0.990 [0.990-0.990] release"},
		{"Redis calls per request, two replicas, 50% of the common maximum", "NOT met", "1.200 [1.200-1.200] release"},
		// Rounds of median p99: 3 vs 2.5 ms; round by round +0.5, +2, +0.5.
		{"Added p99 over the in-memory bulkhead, one replica, 50% of the common maximum", "met", "+0.500 ms (p99 3.000 vs 2.500 ms"},
		{"Added p99 over the in-memory bulkhead, two replicas, 50% of the common maximum", "NOT met", "+27.500 ms"},
		{"Redis CPU per 1,000 requests, one replica", "reported", "110.0 [110.0-110.0] ms at 50% of the common maximum (INFO used_cpu_sys+user; threads' counters: 105.0"},
	})
	if g := goals["Throughput on the Redis ledger, one replica, closed loop"]; !strings.Contains(g.Note, "(bulkhead-redis 19%, in-memory 15%)") {
		t.Errorf("throughput note: %q", g.Note)
	}
	if g := goals["Added p99 over the in-memory bulkhead, one replica, 50% of the common maximum"]; !strings.Contains(g.Measured, "round by round +0.500 [+0.500-+2.000] ms") {
		t.Errorf("round by round: %q", g.Measured)
	}
	var b strings.Builder
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "## The Redis ledger") || !strings.Contains(b.String(), "| reported |") {
		t.Errorf("results.md lacks the Redis ledger's section or a reported goal:\n%s", b.String())
	}
	// Without capacity leases, their columns are empty.
	if want := "| bulkhead-redis | 1.0100 | 0.9900 | 0.0000 | - | 0 | 1.00 | 1.00 | - |"; !strings.Contains(b.String(), want) {
		t.Errorf("results.md lacks %q:\n%s", want, b.String())
	}
}

// goalCase is a goal's expected verdict ("met", "NOT met", "reported") and
// a part of its measured text.
type goalCase struct{ name, verdict, measured string }

func goalsByName(r *Results) map[string]Goal {
	goals := map[string]Goal{}
	for _, g := range r.Goals {
		goals[g.Name] = g
	}
	return goals
}

// checkGoals checks each case against the goal of its name.
func checkGoals(t *testing.T, goals map[string]Goal, cases []goalCase) {
	t.Helper()
	for _, tt := range cases {
		g, ok := goals[tt.name]
		if !ok {
			t.Errorf("no goal %q", tt.name)
			continue
		}
		if v := g.verdictText("met", "NOT met"); v != tt.verdict || !strings.Contains(g.Measured, tt.measured) {
			t.Errorf("%s: %s, %q; want %s, containing %q", tt.name, v, g.Measured, tt.verdict, tt.measured)
		}
	}
}
