package meshsim

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/redisproc"
)

// Markdown writes the results as the tables of docs/performance.md.
func (r *Results) Markdown(w io.Writer) {
	p := r.Plan
	limited := "every fourth limited to 4"
	switch {
	case p.Limit > 0:
		limited = fmt.Sprintf("each limited to %d", p.Limit)
	case !p.Limited:
		limited = "none limited"
	}
	fmt.Fprintf(w, "Run of %s (load average at the start %s): %d workers per Envoy, %.0f Checks/s in all, "+
		"%d bulkheads (%s), %d tenants, %v warm-up then a %v window per N; %s.\n\n",
		r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Load, p.Workers, p.Rate, p.Bulkheads, limited, p.Tenants, p.Warmup, p.Window, p.daemons())
	fmt.Fprintln(w, "| Envoys | connections | access-log streams | daemon RSS | RSS above idle per Envoy | goroutines | goroutines per stream | Check p50 / p99 | release lag p99 | daemon CPU per request | daemon CPU | cap held |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, x := range r.Runs {
		caps := "yes"
		if x.Caps.Violations > 0 {
			caps = fmt.Sprintf("**no** (%d over, %v)", x.Caps.Violations, x.Caps.Over)
		}
		caps += fmt.Sprintf(" (%d/%d at limit)", x.Caps.AtLimit, x.Caps.Checked)
		conns := fmt.Sprint(x.Connections)
		if x.HealthConnections > 0 {
			conns += fmt.Sprintf(" + %d health", x.HealthConnections)
		}
		fmt.Fprintf(w, "| %d | %s | %.0f | %.1f MiB | %.1f KiB | %.0f | %.2f | %.2f / %.2f ms | %.2f ms | %.0f us | %.2f cores | %s |\n",
			x.Envoys, conns, x.Streams, mib(x.RSS), x.RSSPerEnvoy()/1024, x.Goroutines, x.GoroutinesPerStream(),
			x.CheckP50, x.CheckP99, x.LagP99, x.CPUPerRequest, x.CPUShare, caps)
	}
	pinning(w, p, r.Runs)
	if h := p.healthCheck(); h > 0 {
		fmt.Fprintf(w, "\nEach Envoy health-checks each daemon every %v on a connection of its own (\"+ N health\"):", h)
		for _, x := range r.Runs {
			fmt.Fprintf(w, " %d Envoys, %d health Checks answered SERVING in the window, %d failed or timed out;", x.Envoys, x.HealthChecks, x.HealthFailed)
		}
		fmt.Fprintf(w, " PINGs per second in all (every connection): %s.\n", pingRates(r.Runs))
	}
	for _, x := range r.Runs {
		if x.LimitedP99 > 0 {
			fmt.Fprintf(w, "\nChecks of the bulkheads with a limit, from sending to the answer (the table's Check p50 / p99 leaves them out: their queue waits are the limiter's), N = %d: p50 / p99 %.2f / %.2f ms.\n",
				x.Envoys, x.LimitedP50, x.LimitedP99)
		}
	}
	if p.Ledger.shared() {
		ledgerTable(w, r.Runs)
	}
	if p.Shares != "" || p.IdleWindow > 0 {
		costTable(w, p, r.Runs)
	}
	if p.Shares != "" && p.Limit > 0 {
		overflowTable(w, p, r.Runs)
	}
	if len(r.Runs) >= 2 {
		a, b := r.Runs[0], r.Runs[len(r.Runs)-1]
		fmt.Fprintf(w, "\nFrom N = %d to N = %d: Check p99 %.2fx (goal <= 1.5x), release lag p99 %.2fx (goal <= 1.5x), "+
			"CPU per request %.2fx (goal <= 1.2x); marginal memory %.1f KiB per Envoy (goal <= 64 KiB), "+
			"marginal goroutines %.2f per stream.\n",
			a.Envoys, b.Envoys, ratio(b.CheckP99, a.CheckP99), ratio(b.LagP99, a.LagP99), ratio(b.CPUPerRequest, a.CPUPerRequest),
			float64(b.RSS-a.RSS)/float64(b.Envoys-a.Envoys)/1024, (b.Goroutines-a.Goroutines)/math.Max(1, b.Streams-a.Streams))
	}
	if len(r.Runs) > 0 {
		x := r.Runs[len(r.Runs)-1]
		fmt.Fprintf(w, "\nAt N = %d: heap in use %.1f MiB (heap goal %.1f MiB; the live heap is in the daemon's log with MESHSIM_DAEMON_GODEBUG=gctrace=1), goroutine stacks %.1f MiB (RSS %.1f MiB, idle %.1f MiB). The daemon's goroutines by creator / where they wait, at the run's end:\n\n",
			x.Envoys, x.HeapInuse/(1<<20), x.NextGC/(1<<20), x.StackInuse/(1<<20), mib(x.RSS), mib(x.IdleRSS))
		for i, c := range x.ByCreator {
			if i == 8 {
				break
			}
			fmt.Fprintf(w, "- %d: %s\n", c.N, c.What)
		}
	}
	if s := r.Storm; s != nil {
		burst := ""
		if r.Plan.StormBurst {
			burst = "; every worker sends a request within the second after the restart"
		}
		fmt.Fprintf(w, "\nReconnect storm at N = %d (the daemon SIGKILLed under load and started again at once; recovery window %.1f s%s):\n\n", s.Envoys, s.Window, burst)
		fmt.Fprintln(w, "| restart | requests running from before, at the window's end | adopted by then | adopted in all | first admission after the start | last refusal after the start | Envoys refused after window + 1 s | Check errors | streams reopened | peak RSS | cap held |")
		fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
		caps := "yes"
		if s.Caps.Violations > 0 {
			caps = fmt.Sprintf("**no** (%d over)", s.Caps.Violations)
		}
		fmt.Fprintf(w, "| %.2f s | %d | %.0f | %.0f | %.2f s | %.2f s | %d | %d | %d | %.1f MiB | %s |\n",
			s.RestartSeconds, s.OldRunning, s.Adopted, s.AdoptedTotal, s.FirstAdmitAfter, s.LastRefusal, s.RefusedLate,
			s.Errors, s.StreamsReopened, mib(s.PeakRSS), caps)
		fmt.Fprintf(w, "\nThe storm's failed Checks by gRPC code: %v; the new process's answers: %v.\n", s.ErrorCodes, s.Daemon)
	}
	if s := r.Steady; s != nil && len(s.RSS) > 1 {
		n := len(s.RSS) - 1
		fmt.Fprintf(w, "\nSteady run at N = %d for %.0f min: RSS %.1f -> %.1f MiB, heap in use %.1f -> %.1f MiB, goroutines %.0f -> %.0f (samples: %s).\n",
			s.Envoys, s.Minutes[n], mib(s.RSS[0]), mib(s.RSS[n]), s.Heap[0]/(1<<20), s.Heap[n]/(1<<20), s.Gor[0], s.Gor[n], steadySamples(s))
	}
	if c := r.Calib; c != nil {
		fmt.Fprintf(w, "\nCalibration at %.0f requests/s through one real Envoy (2 workers) and one simulated Envoy, in turn against one daemon, %d rounds of %.0f s: "+
			"daemon CPU per request %.1f us (Envoy; rounds %v) vs %.1f us (simulator; rounds %v): %.3fx (goal within 10%%).\n",
			c.Rate, c.Rounds, c.Window, c.EnvoyCPU, roundsOf(c.EnvoyAll), c.SimCPU, roundsOf(c.SimAll), ratio(c.SimCPU, c.EnvoyCPU))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
}

// pingRates is each run's PINGs per second over its window.
func pingRates(runs []Result) string {
	var out []string
	for _, x := range runs {
		out = append(out, fmt.Sprintf("%.0f", float64(x.Pings)/max(x.WindowSeconds, 1e-9)))
	}
	return strings.Join(out, ", ")
}

// daemons says what served the run: the ledger, the replicas and how the
// Envoys spread over them.
func (p Plan) daemons() string {
	ledger := map[Ledger]string{LedgerRedis: "the Redis ledger (fail_closed)",
		LedgerLeases: "the Redis ledger with capacity leases (fail_closed)"}[p.Ledger]
	if ledger == "" {
		return "one daemon on the in-memory ledger"
	}
	if p.Replicas <= 1 {
		return "one daemon on " + ledger + ", on a redis-server of the run's own"
	}
	return fmt.Sprintf("%d daemon replicas on %s, on a redis-server of the run's own, each Envoy spread over them by %s "+
		"(the daemon figures are the replicas' sums)", p.Replicas, ledger, p.Spread)
}

// costTable writes the daemon's cost per Envoy: idle (the idle window)
// and under the load, with the requests that passed a share instead of a
// Check, and the RTDS and LRS messages of the window.
func costTable(w io.Writer, p Plan, runs []Result) {
	admission := "strict (every request a Check)"
	if p.Shares != "" {
		admission = "shares (mode " + p.Shares + ")"
	}
	fmt.Fprintf(w, "\nDaemon cost per Envoy, %s; idle: a %v window with every Envoy connected and no requests; load: the window above:\n\n", admission, p.IdleWindow)
	fmt.Fprintln(w, "| Envoys | idle: daemon CPU | idle: per Envoy per s | load: requests | by a share | overflowed at a share | Checks | daemon CPU | per Envoy per s | per request | RTDS responses/s | LRS reports/s | daemon RSS | share permits held / Σ max_requests |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range runs {
		idle, idleEnvoy := "-", "-"
		if i := x.Idle; i != nil {
			idle, idleEnvoy = fmt.Sprintf("%.4f cores", i.CPUShare), fmt.Sprintf("%.1f us", i.CPUPerEnvoy)
		}
		win := max(x.WindowSeconds, 1e-9)
		fmt.Fprintf(w, "| %d | %s | %s | %d | %d | %d | %d | %.4f cores | %.1f us | %.1f us | %.1f | %.1f | %.1f MiB | %.0f / %.0f |\n",
			x.Envoys, idle, idleEnvoy, x.Requests, x.SharesAdmitted, x.SharesOverflow, x.Checks, x.CPUShare, x.CPUPerEnvoy, x.CPUPerRequest,
			float64(x.RTDSResponses)/win, float64(x.LRSReports)/win, mib(x.RSS), x.SharesHeld, x.SharesLimit)
	}
}

// ledgerTable writes the shared ledger's cost per N: the daemons' calls to
// Redis by operation, the scripts Redis ran and its CPU.
func ledgerTable(w io.Writer, runs []Result) {
	fmt.Fprintln(w, "\nThe shared ledger in the window (every replica; Redis's figures from its INFO; Redis CPU idle: while the daemons "+
		"ran before the load, per second; bare Redis idle: the redis-server alone, per second, over "+
		fmt.Sprintf("%.0f s", redisproc.FloorWindow.Seconds())+" after it started, before the daemons did; above the bare floor: "+
		"Redis's CPU in the window less the bare rate over the window, per admitted request, the daemons' own idle ticks still in it):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| Envoys | admitted | Redis calls per admitted request | by operation | failed calls | Redis scripts per admitted request | Redis time in scripts per admitted request | Redis CPU per admitted request | above the bare floor | Redis CPU per 1,000 requests | Redis CPU idle | bare Redis idle | admitted from leases |")
	fmt.Fprintln(w, "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range runs {
		l := x.Ledger
		if l == nil {
			fmt.Fprintf(w, "| %d | %d | - | - | - | - | - | - | - | - | - | - | - |\n", x.Envoys, x.Admitted)
			continue
		}
		// A results.json from before the bare floor was measured has none.
		above, bare := "-", "-"
		if l.RedisBareCPU > 0 {
			above, bare = fmt.Sprintf("%.2f us", l.RedisCPUAboveBare), fmt.Sprintf("%.2f ms/s", l.RedisBareCPU)
		}
		fmt.Fprintf(w, "| %d | %d | %.4f | %s | %.0f | %.4f | %.2f us | %.2f us | %s | %.2f ms | %.2f ms/s | %s | %.1f%% |\n", x.Envoys, x.Admitted,
			l.CallsPerAdmitted, byOp(l.Calls), l.Failed, l.ScriptsPerAdmitted, l.ScriptUsPerAdmitted, l.RedisCPUPerAdmitted, above,
			l.RedisCPUPer1k, l.RedisIdleCPU, bare, 100*l.FromLeases)
	}
}

// byOp lists per-operation figures, largest first: "release 0.51, lease 0.10".
func byOp(calls map[string]float64) string {
	ops := make([]string, 0, len(calls))
	for op := range calls {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool {
		return calls[ops[i]] > calls[ops[j]] || calls[ops[i]] == calls[ops[j]] && ops[i] < ops[j]
	})
	parts := make([]string, 0, len(ops))
	for _, op := range ops {
		parts = append(parts, fmt.Sprintf("%s %.4f", op, calls[op]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func steadySamples(s *Steady) string {
	var parts []string
	for i := range s.RSS {
		parts = append(parts, fmt.Sprintf("%.0f min %.1f MiB/%.0f", s.Minutes[i], mib(s.RSS[i]), s.Gor[i]))
	}
	return strings.Join(parts, ", ")
}

func roundsOf(v []float64) string {
	var parts []string
	for _, x := range v {
		parts = append(parts, fmt.Sprintf("%.1f", x))
	}
	return strings.Join(parts, ", ")
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// SVG writes four panels against N (log scale): RSS, goroutines,
// Check and release-lag p99, CPU per request.
func (r *Results) SVG(w io.Writer) {
	const pw, ph, pad = 360.0, 220.0, 50.0
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", 2*pw, 2*ph+20)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/><text x="10" y="14" font-size="13">Bulkhead daemon against the number of Envoys (meshsim, %s)</text>`+"\n",
		r.Started.UTC().Format(time.DateOnly))
	type series struct {
		name  string
		color string
		y     func(Result) float64
	}
	panels := []struct {
		title string
		s     []series
	}{
		{"Daemon RSS (MiB; the slope is the cost per Envoy)", []series{{"MiB", "#1f77b4", func(x Result) float64 { return mib(x.RSS) }}}},
		{"Goroutines", []series{{"goroutines", "#2ca02c", func(x Result) float64 { return x.Goroutines }}}},
		{"p99 (ms)", []series{{"Check", "#d62728", func(x Result) float64 { return x.CheckP99 }},
			{"release lag", "#9467bd", func(x Result) float64 { return x.LagP99 }}}},
		{"Daemon CPU per request (us)", []series{{"us", "#ff7f0e", func(x Result) float64 { return x.CPUPerRequest }}}},
	}
	if len(r.Runs) == 0 {
		fmt.Fprintln(w, "</svg>")
		return
	}
	lx := func(n int) float64 { return math.Log10(float64(max(n, 1))) }
	x0, x1 := lx(r.Runs[0].Envoys), lx(r.Runs[len(r.Runs)-1].Envoys)
	if x1 <= x0 {
		x1 = x0 + 1
	}
	for i, p := range panels {
		ox, oy := float64(i%2)*pw, 20+float64(i/2)*ph
		ymax := 0.0
		for _, s := range p.s {
			for _, x := range r.Runs {
				ymax = math.Max(ymax, s.y(x))
			}
		}
		if ymax <= 0 {
			ymax = 1
		}
		ymax *= 1.1
		px := func(n int) float64 { return ox + pad + (lx(n)-x0)/(x1-x0)*(pw-pad-20) }
		py := func(v float64) float64 { return oy + ph - 30 - v/ymax*(ph-60) }
		fmt.Fprintf(w, `<text x="%.0f" y="%.0f" font-size="12">%s</text>`+"\n", ox+pad, oy+16, p.title)
		fmt.Fprintf(w, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", ox+pad, py(0), ox+pw-20, py(0))
		fmt.Fprintf(w, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", ox+pad, py(0), ox+pad, py(ymax))
		for _, f := range []float64{0, 0.5, 1} {
			fmt.Fprintf(w, `<text x="%.0f" y="%.0f" text-anchor="end">%.3g</text>`+"\n", ox+pad-4, py(f*ymax/1.1)+4, f*ymax/1.1)
		}
		for _, x := range r.Runs {
			fmt.Fprintf(w, `<text x="%.0f" y="%.0f" text-anchor="middle">%d</text>`+"\n", px(x.Envoys), py(0)+14, x.Envoys)
		}
		for j, s := range p.s {
			var pts []string
			for _, x := range r.Runs {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(x.Envoys), py(s.y(x))))
				fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(x.Envoys), py(s.y(x)), s.color)
			}
			fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
			if len(p.s) > 1 {
				fmt.Fprintf(w, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", ox+pw-110, oy+16+float64(j+1)*13, s.color, s.name)
			}
		}
		fmt.Fprintf(w, `<text x="%.0f" y="%.0f" text-anchor="middle">Envoys (log)</text>`+"\n", ox+pw/2, oy+ph-4)
	}
	fmt.Fprintln(w, "</svg>")
}

// overflowTable writes what the share clusters' circuit breakers turned
// away (Envoy's immediate 503) against the requests, with the load the
// Envoys reported and the shares they ran with (Plan.Limit).
func overflowTable(w io.Writer, p Plan, runs []Result) {
	skew := "every Envoy alike"
	if p.Skew > 0 {
		skew = fmt.Sprintf("one busy Envoy with %.0f%% of the requests", 100*p.Skew)
		if p.Shift > 0 {
			skew += fmt.Sprintf(", the next one every %v", p.Shift)
		}
	}
	arrivals := "evenly spaced"
	if p.Poisson {
		arrivals = "Poisson"
	}
	fmt.Fprintf(w, "\nShare overflows, limit %d, load %.0f%% of it (%.0f requests/s, %s arrivals, durations %v), %s; "+
		"in flight: the Envoys' load reports in the window, summed (mean and peak); shares: at each report, min / mean / max (strict: the reports that ran strict):\n\n",
		p.Limit, 100*p.Load, p.Rate, arrivals, durationsOf(p.Durations), skew)
	fmt.Fprintln(w, "| Envoys | requests | on a share | overflowed | overflowed % | Checks (denied) | busy Envoy: on a share / overflowed | in flight mean / peak | busy Envoy's share | the others' shares | strict reports |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")
	for _, x := range runs {
		mean, peak := inFlight(x.Samples, x.Envoys)
		busy := "-"
		if p.Skew > 0 {
			busy = fmt.Sprintf("%d / %d", x.BusyAdmitted+x.BusyOverflow, x.BusyOverflow)
		}
		strict := 0
		for _, s := range x.Samples {
			if s.Share < 0 {
				strict++
			}
		}
		fmt.Fprintf(w, "| %d | %d | %d | %d | %.3f%% | %d (%d) | %s | %.1f / %d | %s | %s | %d of %d |\n",
			x.Envoys, x.Requests, x.SharesAdmitted+x.SharesOverflow, x.SharesOverflow, 100*float64(x.SharesOverflow)/math.Max(1, float64(x.Requests)),
			x.Checks, x.Denied, busy, mean, peak, sharesOf(x.Samples, true, p.Skew > 0), sharesOf(x.Samples, false, p.Skew > 0), strict, len(x.Samples))
	}
}

// inFlight is the mean and the peak of the Envoys' reported requests in
// flight, summed over the Envoys: each Envoy reports once an interval, so
// the k-th reports of the n Envoys make one round.
func inFlight(samples []ShareSample, n int) (mean float64, peak int) {
	if len(samples) == 0 {
		return 0, 0
	}
	sum, seen, rounds := 0, map[int]int{}, map[int]int{}
	for _, s := range samples {
		sum += s.InFlight
		rounds[seen[s.Envoy]] += s.InFlight
		seen[s.Envoy]++
	}
	for _, r := range rounds {
		peak = max(peak, r)
	}
	return float64(sum) * float64(n) / float64(len(samples)), peak
}

// sharesOf is the min / mean / max of the shares of the busy Envoy's
// samples (busy) or the others' (with skew; without, every sample).
func sharesOf(samples []ShareSample, busy, skew bool) string {
	lo, hi, sum, k := math.MaxInt, 0, 0, 0
	for _, s := range samples {
		if s.Share < 0 || skew && s.Busy != busy || !skew && !busy {
			continue
		}
		lo, hi, sum, k = min(lo, s.Share), max(hi, s.Share), sum+s.Share, k+1
	}
	if k == 0 {
		return "-"
	}
	return fmt.Sprintf("%d / %.1f / %d", lo, float64(sum)/float64(k), hi)
}

func durationsOf(mix []DurationShare) string {
	if len(mix) == 0 {
		mix = Config{}.withDefaults().Durations
	}
	var b strings.Builder
	for i, d := range mix {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%g%% %v", d.Weight, d.Duration)
	}
	return b.String()
}

// pinning writes where the daemon and the simulator ran (-daemon-cpus,
// -sim-cpus, as read from /proc at each window's end), the simulator's own
// CPU, and how the priming went: a simulator at its CPUs' end is the
// run's limit, not the daemon.
func pinning(w io.Writer, p Plan, runs []Result) {
	where := func(want string, a *Affinity) string {
		if want == "" {
			want = "unpinned"
		} else {
			want = "pinned to CPUs " + want
		}
		if a == nil {
			return want
		}
		return want + " (read back: " + a.String() + ")"
	}
	fmt.Fprintln(w)
	for _, x := range runs {
		fmt.Fprintf(w, "- N = %d: the daemon %s; the simulator %s, its own CPU in the window %.2f cores; "+
			"after the priming %d access-log streams open, %d priming Checks failed.\n",
			x.Envoys, where(p.DaemonCPUs, x.DaemonAffinity), where(p.SimCPUs, x.SimAffinity), x.SimCPUShare, x.PrimedStreams, x.PrimeErrors)
	}
}
