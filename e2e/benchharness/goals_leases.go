package main

import (
	"fmt"
	"strings"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
)

// The goals of the capacity leases (issue 25), each against the in-memory
// bulkhead (Bulkhead) through the same bootstrap, for one replica
// (RedisLeases) and for two behind one Envoy (RedisLeasesTwo). The figures
// at a fixed rate are at 50% of the common maximum (lagLoad), where the
// load's concurrency is far below half the limit: every request is
// admitted, from a lease unless the lease has no room. At the limit (the
// near phase), the calls per request of two replicas with leases
// (RedisLeasesTwoNear) against the per-request path's (1 acquire + 1
// release), measured beside it (RedisTwoNear). Not measured here: the
// figures from a load driver without Envoy.

// The capacity leases' bounds (issue 25, "What it must show").
const (
	// minLeaseThroughput: of the in-memory bulkhead's (closed loop, medians).
	minLeaseThroughput = 0.95
	// maxLeaseAddedP99Ms: over the in-memory bulkhead's p99, milliseconds.
	maxLeaseAddedP99Ms = 0.5
	// maxLeaseCalls: Redis calls per admitted request, every call but the
	// state and replicas ticks.
	maxLeaseCalls = 0.05
	// maxLeaseRedisMsPer1k: Redis's CPU per 1,000 requests (its INFO), ms.
	maxLeaseRedisMsPer1k = 5.0
	// maxLeaseDaemonCPU: the daemons' CPU per request, of the in-memory
	// daemon's.
	maxLeaseDaemonCPU = 1.1
	// maxLeaseRedisUs: Redis's CPU per request (its threads' counters)
	// above the bare server's idle floor, us.
	maxLeaseRedisUs = 1.0
)

// leaseGoals are the capacity leases' goals, for each configuration with
// them.
func (r *Results) leaseGoals() []Goal {
	var gs []Goal
	for _, c := range []struct{ name, what string }{{RedisLeases, "one replica"}, {RedisLeasesTwo, "two replicas"}} {
		gs = append(gs, r.leaseThroughputGoal(c.name, c.what), r.leaseLatencyGoal(c.name, c.what),
			r.leaseCallsGoal(c.name, c.what), r.leaseRedisCPUGoal(c.name, c.what),
			r.leaseDaemonCPUGoal(c.name, c.what), r.leaseRedisUsGoal(c.name, c.what))
	}
	return append(gs, r.leaseNearGoal())
}

// atHalf names the rate of the goals at a fixed rate.
var atHalf = fmt.Sprintf("%.0f%% of the common maximum", 100*lagLoad)

func (r *Results) leaseThroughputGoal(name, what string) Goal {
	g := Goal{Name: "Throughput with capacity leases, " + what + ", closed loop",
		Target: fmt.Sprintf(">= %.2fx the in-memory bulkhead through the same Envoy (median of the rounds)", minLeaseThroughput)}
	if !r.throughputVsMemory(&g, name, minLeaseThroughput) {
		return g
	}
	rounds := r.closedRounds(name)
	calls, lease := figureSpread(rounds, ledgerOf(callsPerRequest)), figureSpread(rounds, ledgerOf(leasePerSecond))
	if calls.Rounds > 0 {
		g.Note = joinNote(g.Note, fmt.Sprintf("at saturation %s Redis calls per request, %s lease calls per second (median [min-max])",
			calls.format("%.4f"), lease.format("%.2f")))
	}
	return g
}

func (r *Results) leaseLatencyGoal(name, what string) Goal {
	g := Goal{Name: fmt.Sprintf("Added p99 over the in-memory bulkhead with capacity leases, %s, %s", what, atHalf),
		Target: fmt.Sprintf("< %.1f ms", maxLeaseAddedP99Ms)}
	r.addedP99VsMemory(&g, name, maxLeaseAddedP99Ms)
	return g
}

// leaseCallsGoal: the calls to Redis per request, the lease's included
// (periodic, but what the admissions from the lease cost); the state and
// replicas ticks, which the ledger makes with or without leases, apart.
func (r *Results) leaseCallsGoal(name, what string) Goal {
	g := Goal{Name: fmt.Sprintf("Redis calls per request with capacity leases, %s, %s", what, atHalf),
		Target: fmt.Sprintf("<= %.2f per admitted request (acquire + release + renew + leave + reopen + lease: every call "+
			"but the state and replicas ticks, stated apart; median of the rounds)", maxLeaseCalls)}
	rounds := r.openRounds(name, BaseCommon, lagLoad)
	total := figureSpread(rounds, ledgerOf(callsPerRequest))
	if total.Rounds == 0 {
		return g
	}
	perOp := func(ops ...admission.Op) Spread {
		return figureSpread(rounds, ledgerOf(func(c *LedgerCost) float64 {
			sum := 0.0
			for _, op := range ops {
				sum += c.PerRequest[string(op)]
			}
			return sum
		}))
	}
	tick := func(op admission.Op) Spread {
		return figureSpread(rounds, ledgerOf(func(c *LedgerCost) float64 { return c.TicksPerSecond[string(op)] }))
	}
	// Redis's own count: the scripts less the ticks' (TickScripts counts
	// the lease's calls among them), the lease's calls added back.
	scripts := figureSpread(rounds, ledgerOf(func(c *LedgerCost) float64 {
		return c.ScriptsPerRequest + c.PerRequest[string(admission.OpLease)]
	}))
	g.Measured = fmt.Sprintf("%s calls per request (daemons: %s acquire + %s release + %s renew/leave/reopen + %s lease); "+
		"Redis: %s scripts (EVALSHA + EVAL) per request, the state and replicas ticks' excepted; "+
		"ticks apart: %s lease + %s state + %s replicas calls per second (every replica); median [min-max] of %d rounds",
		total.format("%.4f"), perOp(admission.OpAcquire).format("%.4f"), perOp(admission.OpRelease).format("%.4f"),
		perOp(admission.OpRenew, admission.OpLeave, admission.OpReopen).format("%.4f"), perOp(admission.OpLease).format("%.4f"),
		scripts.format("%.4f"), tick(admission.OpLease).format("%.2f"), tick(admission.OpState).format("%.2f"),
		tick(admission.OpReplicas).format("%.2f"), total.Rounds)
	g.Met = verdict(total.Median <= maxLeaseCalls)
	if failed := figureSpread(rounds, ledgerOf(func(c *LedgerCost) float64 { return float64(c.Failed) })); failed.Max > 0 {
		g.Note = fmt.Sprintf("calls failed (error or time-out): %s per window", failed.format("%.0f"))
	}
	if bad := figureSpread(rounds, notOK); bad.Max > 0 {
		g.Note = joinNote(g.Note, fmt.Sprintf("requests without a 200 (not all admitted; the figure is per request completed): %s per window",
			bad.format("%.0f")))
	}
	return g
}

func (r *Results) leaseRedisCPUGoal(name, what string) Goal {
	g := Goal{Name: fmt.Sprintf("Redis CPU per 1,000 requests with capacity leases, %s, %s", what, atHalf),
		Target: fmt.Sprintf("<= %.0f ms (Redis's INFO used_cpu_sys+user, median of the rounds)", maxLeaseRedisMsPer1k)}
	rounds := r.openRounds(name, BaseCommon, lagLoad)
	info := figureSpread(rounds, ledgerOf(func(c *LedgerCost) float64 { return c.CPUMsPer1k }))
	if info.Rounds == 0 {
		return g
	}
	// Redis's CPU per second of the window: the part that does not follow
	// the load (its own timers, the ticks) weighs on the figure at low rates.
	perSecond := figureSpread(rounds, func(p *Phase) (float64, bool) {
		us, ok := redisUs(p)
		return us * p.RPS / 1000, ok
	})
	g.Measured = fmt.Sprintf("%s ms (INFO); Redis used %s ms of CPU per second of the window (threads' counters); median [min-max] of %d rounds",
		info.format("%.2f"), perSecond.format("%.2f"), info.Rounds)
	g.Met = verdict(info.Median <= maxLeaseRedisMsPer1k)
	return g
}

// leaseDaemonCPUGoal: the daemons' CPU per request against the in-memory
// daemon's (Phase.CPU["sidecar"]: every replica of the configuration).
func (r *Results) leaseDaemonCPUGoal(name, what string) Goal {
	g := Goal{Name: fmt.Sprintf("Daemon CPU per request with capacity leases, %s, %s", what, atHalf),
		Target: fmt.Sprintf("<= %.1fx the in-memory daemon's (threads' counters; of two replicas, both daemons together; "+
			"median of the rounds)", maxLeaseDaemonCPU)}
	xRounds, bRounds := r.openRounds(name, BaseCommon, lagLoad), r.openRounds(Bulkhead, BaseCommon, lagLoad)
	x, b := figureSpread(xRounds, sidecarUs), figureSpread(bRounds, sidecarUs)
	if x.Median <= 0 || b.Median <= 0 {
		return g
	}
	per := roundRatios(xRounds, bRounds, sidecarUs)
	g.Measured = fmt.Sprintf("%.2fx (%s vs %s us per request, median [min-max]); round by round %s",
		x.Median/b.Median, x.format("%.1f"), b.format("%.1f"), per.format("%.2fx"))
	g.Met = verdict(x.Median/b.Median <= maxLeaseDaemonCPU)
	g.Note = spreadNoteOf(name, x, "in-memory", b)
	return g
}

// leaseRedisUsGoal is judged on Redis's CPU per request above the bare
// redis-server's idle floor: the goal's own words are a marginal cost (one
// Redis core carrying a million admissions a second), and a bare Redis's
// timers (about 2 ms a second) are most of 1 us per request at this rate
// whatever Bulkhead does. The daemons' periodic calls stay in the figure.
// A results.json from before the floor was measured is judged on the
// whole figure, which bounds the other from above.
func (r *Results) leaseRedisUsGoal(name, what string) Goal {
	g := Goal{Name: fmt.Sprintf("Redis CPU per request with capacity leases, %s, %s", what, atHalf),
		Target: fmt.Sprintf("<= %.0f us per admitted request above the bare redis-server's idle floor (judged on that figure: "+
			"the goal is what an admission costs Redis, a million a second on one core; the redis-server's threads' counters, "+
			"median of the rounds; through Envoy only: this harness has no load driver without it)", maxLeaseRedisUs)}
	rounds := r.openRounds(name, BaseCommon, lagLoad)
	us := figureSpread(rounds, redisUs)
	if us.Rounds == 0 {
		return g
	}
	scripts := figureSpread(rounds, ledgerOf(func(c *LedgerCost) float64 { return c.ScriptUsPerRequest }))
	above := figureSpread(rounds, redisUsAboveIdle)
	floor := r.redisIdleFloor(name)
	if above.Rounds == 0 || floor == nil {
		g.Measured = fmt.Sprintf("%s us per request in all, of which running scripts %s us (commandstats); median [min-max] of %d rounds",
			us.format("%.2f"), scripts.format("%.2f"), us.Rounds)
		g.Met = verdict(us.Median <= maxLeaseRedisUs)
		g.Note = "no idle floor measured: judged on Redis's whole CPU per request, which bounds the figure above the floor from above"
		return g
	}
	g.Measured = fmt.Sprintf("%s us per request above the idle floor (judged); %s us per request in all, of which running scripts "+
		"%s us (commandstats); the floor: %.2f ms a second, over %.1f s before any daemon connected; median [min-max] of %d rounds",
		above.format("%.2f"), us.format("%.2f"), scripts.format("%.2f"), floor.MsPerSecond(), floor.Window.Seconds(), above.Rounds)
	g.Met = verdict(above.Median <= maxLeaseRedisUs)
	return g
}

// callsPerRequest is every call to Redis per request but the state and
// replicas ticks: the request operations and, with capacity leases, the
// lease's calls (LedgerCost.PerRequest holds exactly those).
func callsPerRequest(c *LedgerCost) float64 {
	sum := 0.0
	for _, v := range c.PerRequest {
		sum += v
	}
	return sum
}

// leasePerSecond is the capacity leases' calls per second, every replica.
func leasePerSecond(c *LedgerCost) float64 { return c.TicksPerSecond[string(admission.OpLease)] }

// notOK is a phase's requests without a 200 (errors and other statuses).
func notOK(p *Phase) (float64, bool) { return float64(p.Errors + p.NonOK), true }

// leaseNearGoal: at the limit the leases shrink to what each replica uses
// and the rest is decided per request, so that the calls per request
// (the lease's included) are at most the per-request path's, 1 acquire +
// 1 release; RedisTwoNear's, the per-request path at the same limit and
// load, and the throughputs against NearStrict's (in memory) are beside.
func (r *Results) leaseNearGoal() Goal {
	g := Goal{Name: "Redis calls per request with capacity leases, two replicas, at the limit (near phase, steady state)",
		Target: fmt.Sprintf("<= the per-request path's 1 acquire + 1 release (2 + %.2f calls per request, every call but the state "+
			"and replicas ticks; median of the rounds)", callsSlack)}
	rounds := r.nearRounds(RedisLeasesTwoNear)
	total := figureSpread(rounds, ledgerOf(callsPerRequest))
	if total.Rounds == 0 {
		return g
	}
	perOp := func(rounds []*Phase, ops ...admission.Op) Spread {
		return figureSpread(rounds, ledgerOf(func(c *LedgerCost) float64 {
			sum := 0.0
			for _, op := range ops {
				sum += c.PerRequest[string(op)]
			}
			return sum
		}))
	}
	g.Measured = fmt.Sprintf("%s calls per request (daemons: %s acquire + %s release + %s renew/leave/reopen + %s lease); "+
		"median [min-max] of %d rounds", total.format("%.3f"), perOp(rounds, admission.OpAcquire).format("%.3f"),
		perOp(rounds, admission.OpRelease).format("%.3f"), perOp(rounds, admission.OpRenew, admission.OpLeave, admission.OpReopen).format("%.3f"),
		perOp(rounds, admission.OpLease).format("%.3f"), total.Rounds)
	g.Met = verdict(total.Median <= 2+callsSlack)
	if per := r.nearRounds(RedisTwoNear); len(per) > 0 {
		g.Note = fmt.Sprintf("the per-request path at the same limit and load (%s): %s calls per request (%s acquire + %s release + "+
			"%s renew/leave/reopen)", RedisTwoNear, figureSpread(per, ledgerOf(callsPerRequest)).format("%.3f"),
			perOp(per, admission.OpAcquire).format("%.3f"), perOp(per, admission.OpRelease).format("%.3f"),
			perOp(per, admission.OpRenew, admission.OpLeave, admission.OpReopen).format("%.3f"))
	}
	var rates []string
	for _, c := range []string{RedisLeasesTwoNear, RedisTwoNear, NearStrict} {
		if rs := r.nearRounds(c); len(rs) > 0 {
			rates = append(rates, fmt.Sprintf("%s %s", c, figureSpread(rs, rps).format("%.0f")))
		}
	}
	g.Note = joinNote(g.Note, "req/s: "+strings.Join(rates, ", "))
	if failed := figureSpread(rounds, ledgerOf(func(c *LedgerCost) float64 { return float64(c.Failed) })); failed.Max > 0 {
		g.Note = joinNote(g.Note, fmt.Sprintf("calls failed (error or time-out): %s per window", failed.format("%.0f")))
	}
	if bad := figureSpread(rounds, notOK); bad.Max > 0 {
		g.Note = joinNote(g.Note, fmt.Sprintf("requests without a 200 (%s; the figure is per request completed): %s per window",
			RedisLeasesTwoNear, bad.format("%.0f")))
	}
	return g
}
