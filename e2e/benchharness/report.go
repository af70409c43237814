package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// writeMarkdown writes results.md: the goals, then every table.
func writeMarkdown(w io.Writer, r *Results) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	kind := "full run"
	if r.Plan.Quick {
		kind = "QUICK run (short windows: indicative only)"
	}
	p("# Bulkhead benchmark results\n\n")
	p("Generated %s by `make bench` (`go run ./e2e/benchharness`), %s. ", r.Generated, kind)
	p("See docs/performance.md for the method and how to read these tables; results.json holds every figure")
	if r.hasOpenLatency() {
		p(", latency.png the open loop's percentiles against the rate")
	} else {
		p(" (no open loop in this run: no latency.png)")
	}
	p(".\n\n")

	p("## Goals\n\n| goal | target | measured | met |\n|---|---|---|---|\n")
	for _, g := range r.Goals {
		met := g.verdictText("yes", "**no**")
		if g.Note != "" {
			met += " (" + g.Note + ")"
		}
		p("| %s | %s | %s | %s |\n", g.Name, g.Target, orDash(g.Measured), met)
	}

	m := r.Machine
	p("\n## Machine\n\n- CPU: %s, %d cores (shared with other work during the run)\n- Kernel %s, %s, %s\n- Load average at start: %s; at end: %s\n",
		m.CPU, m.Cores, m.Kernel, m.Go, m.Envoy, m.LoadAvgStart, m.LoadAvgEnd)
	p("- Envoy --concurrency 2; closed loop %d connections, %d round(s) of %v after %v warm-up; open loop %d connections, %v after %v warm-up; upstream delay %v\n",
		r.Plan.ClosedConns, r.Plan.Rounds, r.Plan.ClosedWindow, r.Plan.ClosedWarmup, r.Plan.OpenConns, r.Plan.OpenWindow, r.Plan.OpenWarmup, r.Plan.UpstreamDelay)

	p("\n## Configurations\n\n| name | what |\n|---|---|\n")
	for _, c := range r.Configs {
		p("| %s | %s |\n", c.Name, c.Title)
	}

	floor, noop := r.medianClosed(Floor), r.medianClosed(Noop)
	p("\n## Closed loop: maximum throughput\n\n")
	p("Median of the rounds, with their spread (min-max): the figure every goal uses. The best round is beside it, for reference only ")
	p("(a best of N picks each configuration's luckiest round). Ratios are of the medians; latency, CPU and other load are of the median round ")
	p("(measured from send).\n\n")
	p("| config | req/s by round | median req/s | min-max | spread | best round | vs floor | vs no-op | p50 ms | p99 ms | envoy+sidecar CPU ms / 1k req | other load, cores | errors |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.Configs {
		ct := r.closedThroughput(c.Name)
		med := r.medianClosedPhase(c.Name)
		if med == nil {
			continue
		}
		var rounds []string
		for _, v := range ct.ByRound {
			rounds = append(rounds, fmt.Sprintf("%.0f", v))
		}
		p("| %s | %s | %.0f | %.0f-%.0f | %.1f%% | %.0f | %s | %s | %.3f | %.3f | %.1f | %.2f | %d |\n", c.Name, strings.Join(rounds, ", "),
			ct.Median, ct.Min, ct.Max, 100*ct.Width(), ct.Max, ratio(ct.Median, floor), ratio(ct.Median, noop),
			med.Latency.P50Ms, med.Latency.P99Ms, pathCPU(med), med.OtherLoad, med.Errors+med.NonOK)
	}

	p("\n## Open loop: latency at fixed rates\n\nLatency from each request's intended send time (coordinated omission corrected); ")
	p("of %d round(s) at the common base, each configuration's round with the median p99 is shown (all rounds are in results.json); ", r.Plan.OpenRounds)
	p("\"added p99\" is against the floor at the same rate. Rate base %q: fractions of the lowest maximum of all configurations ", BaseCommon)
	p("(every one carries it); %q: fractions of the floor's maximum, as the issue asks. Send lag p99 is the load generator's own lateness; ", BaseFloor)
	p("censored requests were still unsent when the run stopped (overload). Other load: CPU used by processes outside the run inside this machine, plus the CPU the hypervisor reports stolen, during the window (contention from outside the VM may not show).\n\n")
	p("| rate base | load | target req/s | config | req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | added p99 ms | send lag p99 ms | other load, cores | errors / censored |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, base := range []string{BaseCommon, BaseFloor} {
		for _, f := range r.Plan.Fractions {
			fl := r.open(Floor, base, f)
			for _, c := range r.Configs {
				ph := r.open(c.Name, base, f)
				if ph == nil {
					continue
				}
				added := "-"
				if fl != nil && c.Name != Floor {
					added = fmt.Sprintf("%+.3f", ph.Latency.P99Ms-fl.Latency.P99Ms)
				}
				sendLag := 0.0
				if ph.SendLag != nil {
					sendLag = ph.SendLag.P99Ms
				}
				p("| %s | %.0f%% | %.0f | %s | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %.3f | %.2f | %d / %d |\n",
					base, 100*f, ph.TargetRPS, c.Name, ph.RPS, ph.Latency.P50Ms, ph.Latency.P90Ms, ph.Latency.P99Ms,
					ph.Latency.P999Ms, ph.Latency.MaxMs, added, sendLag, ph.OtherLoad, ph.Errors+ph.NonOK, ph.Censored)
			}
		}
	}

	p("\n## CPU per 1,000 requests\n\nFrom /proc/PID/stat (utime+stime) over each window. Sidecar = the no-op server or the bulkhead daemon (every replica's, on the Redis ledger; Redis's own CPU is in \"The Redis ledger\"); ")
	p("harness = load generator + upstream (the same work in every configuration).\n\n")
	p("Envoy us and runs: Envoy's CPU per request from its threads' nanosecond counters, and how often its threads were put on a CPU per request ")
	p("(schedstat timeslices: event-loop wake-ups, which interference hardly changes).\n\n")
	p("| phase | config | envoy ms | sidecar ms | envoy+sidecar ms | harness ms | envoy cores | sidecar cores | envoy us / req | envoy runs / req | sidecar runs / req |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	reported := r.reported()
	for _, ph := range reported {
		p("| %s | %s | %.1f | %s | %.1f | %.1f | %.2f | %s | %.1f | %.2f | %s |\n", phaseName(*ph), ph.Config, ph.CPU["envoy"].MsPer1k,
			sidecar(*ph, func(u CPUUse) float64 { return u.MsPer1k }, "%.1f"), pathCPU(ph), ph.CPU["harness"].MsPer1k,
			ph.CPU["envoy"].Cores, sidecar(*ph, func(u CPUUse) float64 { return u.Cores }, "%.2f"),
			ph.CPU["envoy"].UsPerRequest, ph.CPU["envoy"].RunsPerRequest, sidecar(*ph, func(u CPUUse) float64 { return u.RunsPerRequest }, "%.2f"))
	}

	p("\n## Envoy and its sidecar\n\nFrom Envoy's own /stats over each window, per request: bytes Envoy wrote to its sidecar's cluster ")
	p("(Checks and access-log entries) and read from it (Check answers and HTTP/2 control frames: window updates, pings), ")
	p("upstream requests (Checks, access-log streams opened), access-log entries written by the gRPC access loggers, and entries dropped.\n\n")
	p("| phase | config | tx bytes / req | rx bytes / req | upstream requests / req | log entries / req | entries dropped |\n|---|---|---|---|---|---|---|\n")
	for _, ph := range reported {
		if t := ph.Sidecar; t != nil {
			p("| %s | %s | %.1f | %.1f | %.3f | %.3f | %d |\n", phaseName(*ph), ph.Config, t.TxBytes, t.RxBytes, t.Requests, t.LogsWritten, t.LogsDropped)
		}
	}

	writeRedis(&b, r)

	p("\n## Bulkhead daemon: memory\n\nFrom the daemon's own /metrics (process and Go collectors) at the end of each phase; ")
	p("bulkhead and bulkhead-batched share one daemon, in turn; the Redis, heartbeat and experiment configurations have daemons of their own ")
	p("(of two replicas, the first's figures).\n\n")
	p("| phase | config | RSS MiB | Go heap in use MiB | Go heap allocated MiB | goroutines |\n|---|---|---|---|---|---|\n")
	if d := r.DaemonIdle; d != nil {
		p("| idle, before any load | - | %.1f | %.1f | %.1f | %.0f |\n", mib(d.RSSBytes), mib(d.HeapInuseBytes), mib(d.HeapAllocBytes), d.Goroutines)
	}
	for _, ph := range reported {
		if d := ph.Daemon; d != nil {
			p("| %s | %s | %.1f | %.1f | %.1f | %.0f |\n", phaseName(*ph), ph.Config, mib(d.RSSBytes), mib(d.HeapInuseBytes), mib(d.HeapAllocBytes), d.Goroutines)
		}
	}
	if r.DaemonPeakRSS > 0 {
		p("\nPeak RSS over the whole run (VmHWM): %.1f MiB.\n", mib(float64(r.DaemonPeakRSS)))
	}

	p("\n## Release lag\n\nPer permit released by the access log, the daemon's bulkhead_permit_release_lag_seconds: hold time ")
	p("(grant to release) less the upstream's time in the same access-log entry (first byte sent upstream to last received). ")
	p("Quantiles are interpolated within the histogram's buckets (0.25, 0.5, 1, 2, 3, 4, 5, 7.5, 10 ms...); ")
	p("the bound is the bucket edge under which 99%% of lags fell; the mean is exact. Mean hold and the upstream's own mean ")
	p("service time are context.\n\n")
	p("| phase | config | releases | mean hold ms | upstream mean ms | mean lag ms | p50 ms | p90 ms | p99 ms | p99 bound ms | lags <= 2 ms | lags <= 5 ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, ph := range reported {
		if l := ph.Lag; l != nil {
			bound := "off scale"
			if l.P99BoundMs != nil {
				bound = fmt.Sprintf("%.0f", *l.P99BoundMs)
			}
			p("| %s | %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %.1f%% | %.1f%% |\n", phaseName(*ph), ph.Config, l.Releases, l.MeanHoldMs,
				l.UpstreamMeanMs, l.MeanLagMs, l.P50Ms, l.P90Ms, l.P99Ms, bound, 100*l.Within2ms, 100*l.Within5ms)
		}
	}

	writeShares(&b, r)
	writeHeartbeat(&b, r)

	if len(r.Micro) > 0 {
		p("\n## Micro-benchmarks\n\nMedian of %d run(s) of -benchtime %s; in process, one core per P (GOMAXPROCS %d).\n\n", r.Plan.BenchCount, r.Plan.BenchTime, r.Machine.Cores)
		p("| package | benchmark | ns/op | B/op | allocs/op |\n|---|---|---|---|---|\n")
		for _, mb := range r.Micro {
			p("| %s | %s | %.1f | %.0f | %.0f |\n", strings.TrimPrefix(mb.Package, "github.com/bulkhead-mesh/bulkhead/"),
				mb.Name, mb.NsPerOp, mb.BytesPerOp, mb.AllocsPerOp)
		}
		p("\n### Scale\n\n")
		scale := func(what, a, b string) {
			x, y := findMicro(r.Micro, a), findMicro(r.Micro, b)
			if x != nil && y != nil && x.NsPerOp > 0 {
				p("- %s: %.2fx (%.0f -> %.0f ns/op)\n", what, y.NsPerOp/x.NsPerOp, x.NsPerOp, y.NsPerOp)
			}
		}
		scale("Check + release, 10 -> 10,000 bulkheads configured (Checks to one)", "BenchmarkCheckBulkheads/spread=one/bulkheads=10", "BenchmarkCheckBulkheads/spread=one/bulkheads=10000")
		scale("Check + release, 10 -> 10,000 bulkheads, Checks round-robin over all", "BenchmarkCheckBulkheads/spread=all/bulkheads=10", "BenchmarkCheckBulkheads/spread=all/bulkheads=10000")
		scale("Check + release, 100 -> 100,000 permits in flight", "BenchmarkCheckInflight/inflight=100", "BenchmarkCheckInflight/inflight=100000")
		scale("access-log entry, 1 -> 64 concurrent streams", "BenchmarkAccessLog/streams=1", "BenchmarkAccessLog/streams=64")
		scale("Check in process -> over gRPC (bufconn)", "BenchmarkCheck", "BenchmarkCheckGRPC")
		scale("limiter vs x/sync/semaphore, sequential", "BenchmarkSemaphoreBaseline", "BenchmarkAcquireRelease")
		scale("limiter vs x/sync/semaphore, parallel", "BenchmarkSemaphoreBaselineParallel", "BenchmarkAcquireReleaseParallel")
		scale("limiter vs x/sync/semaphore, contended", "BenchmarkSemaphoreBaselineContended", "BenchmarkAcquireReleaseContended")
	}
	if len(r.Problems) > 0 {
		p("\n## Problems during the run\n\n")
		for _, pr := range r.Problems {
			p("- %s\n", pr)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// reported are the phases the tables show: each configuration's
// closed-loop round of median throughput, then its open-loop round of
// median p99 at each rate.
func (r *Results) reported() []*Phase {
	var out []*Phase
	for _, c := range r.Configs {
		if ph := r.medianClosedPhase(c.Name); ph != nil {
			out = append(out, ph)
		}
	}
	for _, base := range []string{BaseCommon, BaseFloor} {
		for _, f := range r.Plan.Fractions {
			for _, c := range r.Configs {
				if ph := r.open(c.Name, base, f); ph != nil {
					out = append(out, ph)
				}
			}
		}
	}
	return out
}

func phaseName(p Phase) string {
	switch p.Loop {
	case "closed":
		return fmt.Sprintf("closed loop, round %d", p.Round)
	case LoopHeartbeat:
		return fmt.Sprintf("heartbeat cost, %s requests, round %d", p.Mix, p.Round)
	case LoopNear:
		return fmt.Sprintf("near the limit (closed loop, %v upstream), round %d", nearDelay, p.Round)
	case LoopNearSwitch:
		return fmt.Sprintf("near the limit, the first %v from idle (closed loop, %v upstream), round %d", nearSwitch, nearDelay, p.Round)
	}
	return fmt.Sprintf("open loop %.0f%% of %s (%.0f req/s), round %d", 100*p.Fraction, p.Base, p.TargetRPS, p.Round)
}

func pathCPU(p *Phase) float64 { return p.CPU["envoy"].MsPer1k + p.CPU["sidecar"].MsPer1k }

func sidecar(p Phase, f func(CPUUse) float64, format string) string {
	u, ok := p.CPU["sidecar"]
	if !ok {
		return "-"
	}
	return fmt.Sprintf(format, f(u))
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func mib(b float64) float64 { return b / (1 << 20) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// problems collects every phase's problems for the report's last section.
func (r *Results) collectProblems() {
	for _, ph := range r.Phases {
		for _, pr := range ph.Problems {
			r.Problems = append(r.Problems, phaseName(ph)+", "+ph.Config+": "+pr)
		}
	}
	r.Problems = slices.Compact(r.Problems)
}
