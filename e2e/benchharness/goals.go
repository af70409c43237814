package main

import (
	"fmt"
	"slices"
)

// Goal is one target of the issue, against this run's figures.
type Goal struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	// Met is nil when the run could not measure it.
	Met  *bool  `json:"met"`
	Note string `json:"note,omitempty"`
}

// Results is everything one run measured (results.json).
type Results struct {
	Generated     string        `json:"generated"`
	Machine       Machine       `json:"machine"`
	Plan          Plan          `json:"plan"`
	Configs       []ConfigInfo  `json:"configs"`
	Goals         []Goal        `json:"goals"`
	Phases        []Phase       `json:"phases"`
	DaemonIdle    *DaemonMemory `json:"daemon_idle,omitempty"`
	DaemonPeakRSS int64         `json:"daemon_peak_rss_bytes,omitempty"`
	Micro         []Micro       `json:"micro,omitempty"`
	// Heartbeat is the heartbeat phase's figures, per mix (from Phases).
	Heartbeat []HeartbeatCost `json:"heartbeat,omitempty"`
	Problems  []string        `json:"problems,omitempty"`
}

// ConfigInfo names a configuration in the report.
type ConfigInfo struct {
	Name  string `json:"name"`
	Title string `json:"title"`
}

// Machine is where the figures come from.
type Machine struct {
	CPU          string `json:"cpu"`
	Cores        int    `json:"cores"`
	Kernel       string `json:"kernel"`
	Go           string `json:"go"`
	Envoy        string `json:"envoy"`
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
}

// bestClosed is a configuration's best closed-loop throughput (best of the
// rounds: noise from other work on the machine only ever lowers it).
func (r *Results) bestClosed(config string) float64 {
	best := 0.0
	for _, p := range r.Phases {
		if p.Loop == "closed" && p.Config == config {
			best = max(best, p.RPS)
		}
	}
	return best
}

// open returns the open-loop phase of config at fraction f of base: of
// several rounds, the one with the median p99 (a whole observed phase, so
// that its latency, CPU and lag agree; one round hit by a burst of other
// work on the machine falls out). nil if there is none.
func (r *Results) open(config, base string, f float64) *Phase {
	var rounds []*Phase
	for i, p := range r.Phases {
		if p.Loop == "open" && p.Config == config && p.Base == base && p.Fraction == f {
			rounds = append(rounds, &r.Phases[i])
		}
	}
	if len(rounds) == 0 {
		return nil
	}
	slices.SortStableFunc(rounds, func(a, b *Phase) int { return cmpFloat(a.Latency.P99Ms, b.Latency.P99Ms) })
	return rounds[(len(rounds)-1)/2]
}

func verdict(ok bool) *bool { return &ok }

// cpuPerRequest is config's CPU per request (microseconds; Envoy, sidecar
// and harness together) at 75% of the common maximum, the median over the
// rounds. On a machine where every process shares the cores, the maximum
// throughput is inversely proportional to it; unlike the closed loop's
// throughput, it hardly moves when other work takes cores away.
func (r *Results) cpuPerRequest(config string) float64 {
	var v []float64
	for _, p := range r.Phases {
		if p.Loop == "open" && p.Config == config && p.Base == BaseCommon && p.Fraction == 0.75 {
			total := 0.0
			for _, u := range p.CPU {
				total += u.MsPer1k
			}
			v = append(v, total)
		}
	}
	return median(v)
}

// evaluate fills r.Goals from the phases and the micro-benchmarks.
func (r *Results) evaluate() {
	var gs []Goal

	g := Goal{Name: "Throughput with the bulkhead", Target: ">= 0.9x the no-op ext_authz configuration (closed loop, best round)"}
	if b, n := r.bestClosed(Bulkhead), r.bestClosed(Noop); b > 0 && n > 0 {
		g.Measured = fmt.Sprintf("%.2fx (%.0f vs %.0f req/s)", b/n, b, n)
		g.Met = verdict(b/n >= 0.9)
		if d := r.bestClosed(NoopALS); d > 0 {
			g.Note = fmt.Sprintf("%.2fx the no-op server speaking the same protocol (%s)", b/d, NoopALS)
		}
	}
	gs = append(gs, g)

	g = Goal{Name: "Throughput with the bulkhead, from CPU per request", Target: ">= 0.9x the no-op ext_authz configuration"}
	if b, n := r.cpuPerRequest(Bulkhead), r.cpuPerRequest(Noop); b > 0 && n > 0 {
		g.Measured = fmt.Sprintf("%.2fx (%.0f vs %.0f us of CPU per request, all processes, at 75%% of the common maximum)", n/b, b, n)
		g.Met = verdict(n/b >= 0.9)
		if d := r.cpuPerRequest(NoopALS); d > 0 {
			g.Note = fmt.Sprintf("%.2fx the no-op server speaking the same protocol", d/b)
		}
	}
	gs = append(gs, g)

	for _, base := range []struct{ name, what string }{
		{BaseFloor, "at 50% of the floor's maximum (the issue's rate)"},
		{BaseCommon, "at 50% of the common maximum (a rate every configuration carries)"},
	} {
		g = Goal{Name: "Added p99 over Envoy alone " + base.what, Target: "< 1 ms (design: < 2 ms)"}
		if b, f := r.open(Bulkhead, base.name, 0.5), r.open(Floor, base.name, 0.5); b != nil && f != nil && b.Latency.N > 0 && f.Latency.N > 0 {
			add := b.Latency.P99Ms - f.Latency.P99Ms
			g.Measured = fmt.Sprintf("%+.3f ms (p99 %.3f vs %.3f ms at %.0f req/s)", add, b.Latency.P99Ms, f.Latency.P99Ms, b.TargetRPS)
			g.Met = verdict(add < 1)
			if add >= 1 && add < 2 {
				g.Note = "meets the design's 2 ms"
			}
			if n := r.open(Noop, base.name, 0.5); n != nil && n.Latency.N > 0 {
				g.Note = joinNote(g.Note, fmt.Sprintf("the no-op ext_authz adds %+.3f ms", n.Latency.P99Ms-f.Latency.P99Ms))
			}
			if n := r.open(NoopALS, base.name, 0.5); n != nil && n.Latency.N > 0 {
				g.Note = joinNote(g.Note, fmt.Sprintf("the no-op server speaking the same protocol adds %+.3f ms", n.Latency.P99Ms-f.Latency.P99Ms))
			}
		}
		gs = append(gs, g)
	}

	g = Goal{Name: "Release lag p99 (buffer_size_bytes: 0) at 50% of the common maximum", Target: "< 5 ms"}
	if b := r.open(Bulkhead, BaseCommon, 0.5); b != nil && b.Lag != nil {
		l := b.Lag
		bound := "off the histogram's scale"
		if l.P99BoundMs != nil {
			bound = fmt.Sprintf("<= %.0f ms", *l.P99BoundMs)
		}
		g.Measured = fmt.Sprintf("p99 ~%.3f ms (interpolated), %s (bucket bound); mean %.3f ms; %.1f%% of lags <= 5 ms",
			l.P99Ms, bound, l.MeanLagMs, 100*l.Within5ms)
		// 5 ms is a bucket edge: the share at or under it is exact.
		g.Met = verdict(l.Within5ms >= 0.99)
		if l.Within5ms >= 0.99 && l.Within5ms < 0.995 {
			g.Note = "at the edge: 99% of the lags are within 5 ms, the rest above"
		}
	}
	gs = append(gs, g)

	g = Goal{Name: "Limiter acquire+release", Target: "<= 1.5x x/sync/semaphore, 0 allocations"}
	if l, s := findMicro(r.Micro, "BenchmarkAcquireRelease"), findMicro(r.Micro, "BenchmarkSemaphoreBaseline"); l != nil && s != nil && s.NsPerOp > 0 {
		ratio := l.NsPerOp / s.NsPerOp
		g.Measured = fmt.Sprintf("%.2fx (%.1f vs %.1f ns/op), %.0f allocs/op", ratio, l.NsPerOp, s.NsPerOp, l.AllocsPerOp)
		g.Met = verdict(ratio <= 1.5 && l.AllocsPerOp == 0)
	}
	gs = append(gs, g)

	g = Goal{Name: "Check cost from 10 to 10,000 bulkheads", Target: "flat, within 1.2x"}
	const bench = "BenchmarkCheckBulkheads/spread=%s/bulkheads=%d"
	one10, one10k := findMicro(r.Micro, fmt.Sprintf(bench, "one", 10)), findMicro(r.Micro, fmt.Sprintf(bench, "one", 10000))
	all10, all10k := findMicro(r.Micro, fmt.Sprintf(bench, "all", 10)), findMicro(r.Micro, fmt.Sprintf(bench, "all", 10000))
	if one10 != nil && one10k != nil && all10 != nil && all10k != nil && one10.NsPerOp > 0 && all10.NsPerOp > 0 {
		one, all := one10k.NsPerOp/one10.NsPerOp, all10k.NsPerOp/all10.NsPerOp
		g.Measured = fmt.Sprintf("%.2fx with 10,000 bulkheads configured (%.0f vs %.0f ns/op, Check + release in process); "+
			"%.2fx with the Checks spread round-robin over all of them (%.0f vs %.0f ns/op)",
			one, one10k.NsPerOp, one10.NsPerOp, all, all10k.NsPerOp, all10.NsPerOp)
		g.Met = verdict(one <= 1.2)
		if all > 1.2 {
			g.Note = "met for the number of bulkheads; spreading the traffic over all of them costs CPU cache misses on per-bulkhead state"
		}
	}
	gs = append(gs, g)

	r.Heartbeat = heartbeatCosts(r.Phases)
	if r.Plan.Heartbeat != nil {
		gs = append(gs, heartbeatGoal(r.Heartbeat))
	}
	r.Goals = gs
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
