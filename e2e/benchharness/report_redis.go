package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
)

// writeRedis writes the Redis ledger's section: for each reported phase of
// a configuration on it (and its near phase's rounds of median
// throughput), the calls per request, the ticks apart, what Redis ran and
// its CPU, and the permits' release lag against the in-memory bulkhead's
// at the same rate.
func writeRedis(b *strings.Builder, r *Results) {
	var phases []*Phase
	for _, ph := range slices.Concat(r.reported(), r.reportedNear()) {
		if ph.Ledger != nil {
			phases = append(phases, ph)
		}
	}
	if len(phases) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## The Redis ledger\n\nThe bulkhead on `ledger.backend: redis` (one redis-server per configuration, loopback, no persistence, ")
	p("`on_unavailable: fail_closed`, the default 50 ms time-out), one replica and two behind the same Envoy, per request and with ")
	p("capacity leases (`ledger.redis.capacity_leases: true`: each replica admits from the permits it leases, and calls Redis per ")
	p("request only when its lease has no room). Per request completed ")
	p("in the window: the daemons' calls by operation (bulkhead_ledger_calls_total, every replica; each one EVALSHA); the periodic ")
	p("calls apart, per second (state: one pipeline of one state script per bulkhead, each replica each second; replicas: one script; ")
	p("each tick also sends an INFO server, which the daemons do not count; lease: the capacity leases' calls, one script per ")
	p("bulkhead, each replica each second and when a lease gives back permits, also counted per request as what the admissions ")
	p("from the leases cost); from Redis's INFO commandstats, the scripts it ran ")
	p("(EVALSHA + EVAL) less the ticks', and the commands those scripts ran inside Redis (the ticks' included); Redis's CPU ")
	p("per 1,000 requests from its INFO (used_cpu_sys + used_cpu_user) and from its threads' counters, and the time it spent ")
	p("running scripts per request (commandstats usec of EVALSHA + EVAL; the rest of its CPU reads and answers the calls), ")
	p("and its CPU per request from its threads' counters above its idle floor: the window's CPU less the floor's rate over the ")
	p("window, per request (what the daemons cost Redis, their periodic calls included, without a bare Redis's own timers; ")
	p("the floor is each redis-server's CPU right after it started, before any daemon connected: \"Idle floors\" below; ")
	p("\"-\": none measured). ")
	p("Nobody waits at these rates unless releases fall behind: the limit (%d) is far above the load's concurrency, so a ", limit)
	p("PUBLISH or a ZRANGE in the window means permits piled up until arrivals queued. The near phase is the exception: its limit ")
	p("is the closed loop's connections, and arrivals wait in Redis's queue for the permits that end.\n\n")
	var floors []string
	for _, c := range r.Configs {
		if f := c.RedisIdleFloor; f != nil {
			floors = append(floors, fmt.Sprintf("%s %.2f ms/s over %.1f s", c.Name, f.MsPerSecond(), f.Window.Seconds()))
		}
	}
	if len(floors) > 0 {
		p("Idle floors (CPU a second of each bare redis-server, INFO used_cpu_sys+user): %s.\n\n", strings.Join(floors, ", "))
	}
	p("| phase | config | acquire / req | release / req | renew+leave / req | lease / req | failed calls | state / s | replicas / s | lease / s | Redis scripts / req | EVAL | in-script commands / req | PUBLISH / req | Redis CPU ms / 1k (INFO) | in scripts us / req | Redis us / req (threads) | Redis us / req above idle floor | Redis cores |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, ph := range phases {
		c := ph.Ledger
		pub := 0.0
		if ph.Requests > 0 {
			pub = float64(c.Commands["publish"]) / float64(ph.Requests)
		}
		above := "-"
		if v := ph.CPU["redis"].UsAboveIdle; v != nil {
			above = fmt.Sprintf("%.2f", *v)
		}
		p("| %s | %s | %.4f | %.4f | %.4f | %s | %d | %.2f | %.2f | %s | %.4f | %d | %.1f | %.3f | %.1f | %.1f | %.1f | %s | %.3f |\n",
			phaseName(*ph), ph.Config, c.PerRequest["acquire"], c.PerRequest["release"], c.PerRequest["renew"]+c.PerRequest["leave"],
			leaseFigure(c.PerRequest, "%.4f"), c.Failed, c.TicksPerSecond["state"], c.TicksPerSecond["replicas"],
			leaseFigure(c.TicksPerSecond, "%.2f"), c.ScriptsPerRequest, c.EvalCalls,
			c.InScriptsPerRequest, pub, c.CPUMsPer1k, c.ScriptUsPerRequest, ph.CPU["redis"].UsPerRequest, above, ph.CPU["redis"].Cores)
	}
	p("\nThe commands Redis ran in each window, per request (ticks' and the harness's own INFO included):\n\n")
	for _, ph := range phases {
		c := ph.Ledger
		var parts []string
		for _, cmd := range slices.Sorted(maps.Keys(c.Commands)) {
			parts = append(parts, fmt.Sprintf("%s %.3f", cmd, float64(c.Commands[cmd])/float64(max(ph.Requests, 1))))
		}
		p("- %s, %s: %s\n", phaseName(*ph), ph.Config, strings.Join(parts, ", "))
	}
	p("\nThe daemons' mean time of one call (bulkhead_ledger_call_seconds), and the release lag against the in-memory bulkhead ")
	p("at the same rate (of two replicas, the one that released most; ")
	p("see \"Release lag\" for the method): a release is one script on Redis per access-log entry, and an access-log stream's ")
	p("entries are handled one after another, so a stream releases at most one permit per Redis round trip; with capacity leases ")
	p("a permit admitted from a lease is released in the daemon, with no call (\"-\": no call of that operation in the window).\n\n")
	p("| phase | config | acquire call ms | release call ms | lease call ms | releases | mean lag ms | p99 ms | in-memory bulkhead: mean lag ms | p99 ms |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, ph := range phases {
		mem := r.sameRate(Bulkhead, ph)
		if ph.Lag == nil || mem == nil || mem.Lag == nil {
			continue
		}
		ms := func(op admission.Op) string {
			v, ok := ph.Ledger.CallMs[string(op)]
			if !ok {
				return "-"
			}
			return fmt.Sprintf("%.3f", v)
		}
		p("| %s | %s | %s | %s | %s | %d | %.3f | %.3f | %.3f | %.3f |\n", phaseName(*ph), ph.Config, ms(admission.OpAcquire),
			ms(admission.OpRelease), ms(admission.OpLease), ph.Lag.Releases, ph.Lag.MeanLagMs, ph.Lag.P99Ms, mem.Lag.MeanLagMs, mem.Lag.P99Ms)
	}
}

// leaseFigure is the capacity leases' figure of byOp, "-" when they made
// no call (off, or the window held none).
func leaseFigure(byOp map[string]float64, verb string) string {
	v, ok := byOp[string(admission.OpLease)]
	if !ok {
		return "-"
	}
	return fmt.Sprintf(verb, v)
}

// sameRate is config's reported phase of the same loop, base and load as
// ph (closed loop: its round of median throughput), or nil.
func (r *Results) sameRate(config string, ph *Phase) *Phase {
	if ph.Loop == "closed" {
		return r.medianClosedPhase(config)
	}
	return r.open(config, ph.Base, ph.Fraction)
}
