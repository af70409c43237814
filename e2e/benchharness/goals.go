package main

import (
	"fmt"
	"strings"

	"github.com/bulkhead-mesh/bulkhead/pkg/redisproc"
)

// Goal is one target of the issue, against this run's figures.
type Goal struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	// Met is nil when the run could not measure it, or when the figure is
	// reported against no bound (ReportOnly).
	Met        *bool  `json:"met"`
	ReportOnly bool   `json:"report_only,omitempty"`
	Note       string `json:"note,omitempty"`
}

// verdictText is how g's verdict reads: met, unmet, reported (a figure
// with no bound) or not measured; yes and no are the words for met.
func (g Goal) verdictText(yes, no string) string {
	switch {
	case g.Met != nil && *g.Met:
		return yes
	case g.Met != nil:
		return no
	case g.ReportOnly && g.Measured != "":
		return "reported"
	}
	return "not measured"
}

// Results is everything one run measured (results.json).
type Results struct {
	Generated string       `json:"generated"`
	Machine   Machine      `json:"machine"`
	Plan      Plan         `json:"plan"`
	Configs   []ConfigInfo `json:"configs"`
	Goals     []Goal       `json:"goals"`
	// Closed is each configuration's closed-loop throughput over the
	// rounds (from Phases): the median decides, the best is beside it.
	Closed        []ClosedThroughput `json:"closed,omitempty"`
	Phases        []Phase            `json:"phases"`
	DaemonIdle    *DaemonMemory      `json:"daemon_idle,omitempty"`
	DaemonPeakRSS int64              `json:"daemon_peak_rss_bytes,omitempty"`
	Micro         []Micro            `json:"micro,omitempty"`
	// Heartbeat is the heartbeat phase's figures, per mix (from Phases).
	Heartbeat []HeartbeatCost `json:"heartbeat,omitempty"`
	Problems  []string        `json:"problems,omitempty"`
}

// ConfigInfo names a configuration in the report.
type ConfigInfo struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	// RedisIdleFloor is the configuration's redis-server's own CPU, idle,
	// over redisproc.FloorWindow right after it started, before any daemon
	// connected; nil with the in-memory ledger.
	RedisIdleFloor *redisproc.Floor `json:"redis_idle_floor,omitempty"`
}

// redisIdleFloor is config's Redis idle floor, nil if it has none (the
// in-memory ledger, or a results.json from before the harness measured
// it).
func (r *Results) redisIdleFloor(config string) *redisproc.Floor {
	for _, c := range r.Configs {
		if c.Name == config {
			return c.RedisIdleFloor
		}
	}
	return nil
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

// open returns the open-loop phase of config at fraction f of base: of
// several rounds, the one with the median p99 (a whole observed phase, so
// that its latency, CPU and lag agree; one round hit by a burst of other
// work on the machine falls out). nil if there is none.
func (r *Results) open(config, base string, f float64) *Phase {
	return medianPhase(r.openRounds(config, base, f), func(p *Phase) float64 { return p.Latency.P99Ms })
}

func verdict(ok bool) *bool { return &ok }

// cpuLoad is the rate (fraction of the common maximum) of the CPU goals:
// the busiest rate every configuration carries.
const cpuLoad = 0.75

// lagLoad is the rate (fraction of the common maximum) of the release-lag
// goal and of Envoy's CPU per request: the 50% load.
const lagLoad = 0.5

// noisy is the width of a spread (max-min over the median) above which a
// goal's note says the rounds disagree: a quiet machine keeps rounds
// within 5% of each other.
const noisy = 0.05

// spreadNote flags the spreads of a goal's two figures (the bulkhead's and
// the no-op hop's) wider than noisy; "" when both are narrower.
func spreadNote(bulkhead, noop Spread) string {
	return spreadNoteOf("bulkhead", bulkhead, "no-op", noop)
}

// spreadNoteOf is spreadNote for two figures named a and b.
func spreadNoteOf(a string, as Spread, b string, bs Spread) string {
	var out []string
	for _, f := range []struct {
		name string
		s    Spread
	}{{a, as}, {b, bs}} {
		if f.s.Rounds > 1 && f.s.Width() > noisy {
			out = append(out, fmt.Sprintf("%s %.0f%%", f.name, 100*f.s.Width()))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "rounds spread over 5% (" + strings.Join(out, ", ") + "): a busy machine; trust the ratio no closer than its spread"
}

// evaluate fills r.Goals from the phases and the micro-benchmarks.
func (r *Results) evaluate() {
	var gs []Goal
	r.Closed = nil
	for _, c := range r.Configs {
		if ct := r.closedThroughput(c.Name); ct.Rounds > 0 {
			r.Closed = append(r.Closed, ct)
		}
	}

	g := Goal{Name: "Throughput with the bulkhead, closed loop",
		Target: ">= 0.95x the no-op ext_authz configuration (median of the rounds)"}
	if b, n := r.closedThroughput(Bulkhead), r.closedThroughput(Noop); b.Median > 0 && n.Median > 0 {
		per := roundRatios(r.closedRounds(Bulkhead), r.closedRounds(Noop), rps)
		g.Measured = fmt.Sprintf("%.2fx (median %s vs %s req/s, [min-max] of %d and %d rounds); round by round %s; best rounds %.2fx (%.0f vs %.0f)",
			b.Median/n.Median, b.format("%.0f"), n.format("%.0f"), b.Rounds, n.Rounds, per.format("%.2fx"), b.Max/n.Max, b.Max, n.Max)
		g.Met = verdict(b.Median/n.Median >= 0.95)
		g.Note = spreadNote(b.Spread, n.Spread)
		if d := r.medianClosed(NoopALS); d > 0 {
			g.Note = joinNote(g.Note, fmt.Sprintf("%.2fx the no-op server speaking the same protocol (%s, medians)", b.Median/d, NoopALS))
		}
	}
	gs = append(gs, g)

	g = Goal{Name: "Throughput with the bulkhead, from CPU per request",
		Target: fmt.Sprintf(">= 0.95x the no-op ext_authz configuration (all processes, %.0f%% of the common maximum, median of the rounds)", 100*cpuLoad)}
	bRounds, nRounds := r.openRounds(Bulkhead, BaseCommon, cpuLoad), r.openRounds(Noop, BaseCommon, cpuLoad)
	if b, n := figureSpread(bRounds, allCPUUs), figureSpread(nRounds, allCPUUs); b.Median > 0 && n.Median > 0 {
		per := roundRatios(nRounds, bRounds, allCPUUs)
		g.Measured = fmt.Sprintf("%.2fx (%s vs %s us of CPU per request, median [min-max]); round by round %s",
			n.Median/b.Median, b.format("%.0f"), n.format("%.0f"), per.format("%.2fx"))
		g.Met = verdict(n.Median/b.Median >= 0.95)
		g.Note = spreadNote(b, n)
		if d := figureSpread(r.openRounds(NoopALS, BaseCommon, cpuLoad), allCPUUs); d.Median > 0 {
			g.Note = joinNote(g.Note, fmt.Sprintf("%.2fx the no-op server speaking the same protocol", d.Median/b.Median))
		}
	}
	gs = append(gs, g)

	g = Goal{Name: "Envoy CPU per request with the bulkhead",
		Target: fmt.Sprintf("<= 1.05x the no-op ext_authz configuration's (%.0f%% of the common maximum, median of the rounds)", 100*lagLoad)}
	bRounds, nRounds = r.openRounds(Bulkhead, BaseCommon, lagLoad), r.openRounds(Noop, BaseCommon, lagLoad)
	if b, n := figureSpread(bRounds, envoyUs), figureSpread(nRounds, envoyUs); b.Median > 0 && n.Median > 0 {
		per := roundRatios(bRounds, nRounds, envoyUs)
		g.Measured = fmt.Sprintf("%.2fx (%s vs %s us per request, median [min-max], threads' CPU counters); round by round %s",
			b.Median/n.Median, b.format("%.1f"), n.format("%.1f"), per.format("%.2fx"))
		g.Met = verdict(b.Median/n.Median <= 1.05)
		g.Note = spreadNote(b, n)
		cb, cn := figureSpread(r.closedRounds(Bulkhead), envoyUs), figureSpread(r.closedRounds(Noop), envoyUs)
		if cb.Median > 0 && cn.Median > 0 {
			g.Note = joinNote(g.Note, fmt.Sprintf("closed loop (saturation) %.2fx (%.1f vs %.1f us, medians)", cb.Median/cn.Median, cb.Median, cn.Median))
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

	g = Goal{Name: fmt.Sprintf("Release lag p99 at %.0f%% of the common maximum", 100*lagLoad),
		Target: "<= 2 ms (99% of lags within 2 ms, median of the rounds)"}
	if rounds := r.openRounds(Bulkhead, BaseCommon, lagLoad); len(rounds) > 0 {
		p99, in2 := figureSpread(rounds, lagP99), figureSpread(rounds, lagWithin2ms)
		if in2.Rounds > 0 {
			g.Measured = fmt.Sprintf("p99 ~%s ms (interpolated in the histogram's buckets), %s%% of lags <= 2 ms (exact: a bucket edge); median [min-max] of %d rounds",
				p99.format("%.3f"), Spread{Rounds: in2.Rounds, Median: 100 * in2.Median, Min: 100 * in2.Min, Max: 100 * in2.Max}.format("%.1f"), in2.Rounds)
			g.Met = verdict(in2.Median >= 0.99)
			if m := r.open(Bulkhead, BaseCommon, lagLoad); m != nil && m.Lag != nil {
				g.Note = fmt.Sprintf("mean lag %.3f ms in the round of median latency", m.Lag.MeanLagMs)
			}
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

	gs = append(gs, r.redisGoals()...)
	gs = append(gs, r.leaseGoals()...)
	gs = append(gs, r.sharesGoals()...)

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
