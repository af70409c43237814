package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

const (
	clearScreen = "\x1b[H\x1b[2J"
	rowFormat   = "%-8s %5s %6s %6s %7s %8s | %6s %6s %6s %5s %8s | %5s  %-9s  %s\n"
)

// render prints the live table: redrawn in place on a terminal, appended as
// a block otherwise.
func (d *demo) render() {
	var b strings.Builder
	if d.tty {
		b.WriteString(clearScreen)
	} else {
		b.WriteString("\n")
	}
	elapsed := time.Since(d.start)
	catalog := "fast"
	if d.slow {
		catalog = fmt.Sprintf("SLOW (about %v per request) since t=%s", d.opts.slowDelay, fmtSeconds(d.slowSince))
	}
	fmt.Fprintf(&b, "Bulkhead demo  t=%s  catalog upstream: %s\n\n", fmtSeconds(elapsed), catalog)
	fmt.Fprintf(&b, "%-8s %-37s| %-36s| %s\n", "", "bulkhead daemon (/metrics)", "clients through Envoy (last second)", "upstream")
	fmt.Fprintf(&b, rowFormat, "route", "limit", "active", "queued", "admit/s", "reject/s",
		"req/s", "ok/s", "rej/s", "err", "p99", "peak", "state", "rejected by reason /s")
	for _, r := range demoRoutes {
		d.renderRow(&b, r.name)
	}
	b.WriteString("(admit/s, reject/s: daemon counters; peak: most requests the upstream served at once;\n" +
		" err: failures other than bulkhead rejections; state, by the main reason of rejections:\n" +
		" REJECTING queue full, SHEDDING queued lower priorities evicted, TIMEOUTS waits ran out,\n" +
		" DENYING no such bulkhead, OPEN circuit open; shares: far from its limit, Envoy's own circuit\n" +
		" breaker admits within the share the daemon gave it: no Check, and active counts the share)\n")
	b.WriteString("\n" + d.priorityLine() + "\n")
	if d.view.scrapeErr != nil {
		fmt.Fprintf(&b, "\n(metrics unavailable: %v)\n", d.view.scrapeErr)
	}
	b.WriteString("\nevents:\n")
	for _, e := range d.events {
		b.WriteString("  " + e + "\n")
	}
	if d.tty {
		b.WriteString("\nCtrl-C to stop.")
		if d.opts.duration > 0 {
			fmt.Fprintf(&b, " Ends by itself in %s.", fmtSeconds(max(d.opts.duration-elapsed, 0)))
		}
		b.WriteString("\n")
	}
	_, _ = io.WriteString(d.out, b.String())
}

func (d *demo) renderRow(b *strings.Builder, name string) {
	row := d.view.rows[name]
	w := routeWindow(d.flows, name)
	secs := max(w.Elapsed.Seconds(), 0.001)
	perSec := func(n int) string { return fmt.Sprintf("%.0f", float64(n)/secs) }
	limit, active, queued, admitted, rejected := "?", "?", "?", "?", "?"
	if row.known {
		limit, active, queued = fmtNum(row.limit), fmtNum(row.active), fmtNum(row.queued)
		admitted, rejected = "-", "-"
		if row.rates {
			admitted, rejected = fmt.Sprintf("%.1f", row.admitted), fmt.Sprintf("%.1f", row.rejected)
		}
	}
	fmt.Fprintf(b, rowFormat, name, limit, active, queued, admitted, rejected,
		perSec(w.Sent), perSec(w.OK()), perSec(bulkheadRejections(w)), fmt.Sprint(otherErrors(w)),
		fmtDur(w.P99()), fmtPeak(d.view.peak[name], true), state(row), fmtReasons(row.rejectedBy, "%.0f"))
}

// rejectingStates name a bulkhead that rejects, by the main reason.
var rejectingStates = map[string]string{
	"queue_full":       "REJECTING",
	"shed":             "SHEDDING",
	"timeout":          "TIMEOUTS",
	"unknown_bulkhead": "DENYING",
	"circuit_open":     "OPEN",
}

// state sums a row up in one word: while it rejects, the main reason of
// its rejections (see rejectingStates); else FULL, queueing or ok.
func state(r bulkheadRow) string {
	switch {
	case !r.known:
		return "?"
	case r.rejected > 0:
		return rejectingStates[mainReason(r.rejectedBy)]
	case r.shares:
		return "shares"
	case r.limit > 0 && r.active >= r.limit:
		return "FULL"
	case r.queued > 0:
		return "queueing"
	default:
		return "ok"
	}
}

// mainReason returns the reason with the highest rate in byReason, the
// first in reasons order on a tie; "queue_full" when byReason names none of
// reasons.
func mainReason(byReason map[string]float64) string {
	best, bestRate := "queue_full", 0.0
	for _, reason := range reasons {
		if x := byReason[reason]; x > bestRate {
			best, bestRate = reason, x
		}
	}
	return best
}

// priorityLine shows how catalog's priorities fare, from the clients' side.
func (d *demo) priorityLine() string {
	parts := []string{"catalog by priority (clients, last second, ok/answered):"}
	for _, f := range d.flows {
		if f.route == "catalog" {
			parts = append(parts, fmt.Sprintf("%s %d/%d", f.priority, f.window.OK(), f.window.Responses()))
		}
	}
	return strings.Join(parts, "  ")
}

// summary prints the final report.
func (d *demo) summary(stopErr error) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n=== Summary: %s of traffic ===\n\n", fmtSeconds(time.Since(d.start)))
	const f = "%-8s %7s %7s %9s %7s %9s %8s %8s %8s %8s  %s\n"
	b.WriteString("Clients (through Envoy):\n")
	fmt.Fprintf(&b, f, "route", "sent", "ok", "rejected", "errors", "cancelled", "p50", "p99", "max", "not sent", "rejected by reason")
	wellFormed, cancelled := true, 0
	for _, r := range demoRoutes {
		s := routeResult(d.flows, r.name)
		wellFormed = wellFormed && s.RejectionsWellFormed()
		counts := map[string]float64{}
		for k, v := range s.ByReason {
			counts[k] = float64(v)
		}
		fmt.Fprintf(&b, f, r.name, fmt.Sprint(s.Sent), fmt.Sprint(s.OK()), fmt.Sprint(bulkheadRejections(s)),
			fmt.Sprint(otherErrors(s)), fmt.Sprint(s.Cancelled), fmtDur(s.P50()), fmtDur(s.P99()), fmtDur(s.Max()),
			fmt.Sprint(s.NotSent), fmtReasons(counts, "%.0f"))
		cancelled += s.Cancelled
	}
	fmt.Fprintf(&b, "(cancelled: in flight when traffic stopped and not finished when the wait for them ended;\n"+
		" not sent: due while %d requests of the flow were out)\n", maxOutstanding)
	b.WriteString(d.stopLine(cancelled) + "\n")
	if wellFormed {
		b.WriteString("Every 503 carried retry-after and x-bulkhead-reason.\n")
	} else {
		b.WriteString("Some 503s lacked retry-after or x-bulkhead-reason (Envoy's own errors, or a bug).\n")
	}

	b.WriteString("\nBulkhead daemon (counters at the end):\n")
	for _, r := range demoRoutes {
		admitted, rejected := d.view.totals(r.name)
		fmt.Fprintf(&b, "  %-8s admitted %s   rejected %s\n", r.name, fmtReasons(admitted, "%.0f"), fmtReasons(rejected, "%.0f"))
	}
	if d.view.cur == nil {
		fmt.Fprintf(&b, "  (no metrics: %v)\n", d.view.scrapeErr)
	}

	b.WriteString("\nPeak concurrency seen by each upstream (the bulkhead keeps it within the limit):\n")
	for _, r := range demoRoutes {
		row := d.view.rows[r.name]
		peak, known := d.view.runPeak[r.name]
		verdict := ""
		if !known {
			verdict = "not known (no control API for this upstream)"
		} else if row.known {
			verdict = "within the limit"
			if float64(peak) > row.limit {
				verdict = "ABOVE THE LIMIT"
			}
			verdict = fmt.Sprintf("limit %s, %s", fmtNum(row.limit), verdict)
		}
		fmt.Fprintf(&b, "  %-8s %3s   %s\n", r.name, fmtPeak(peak, known), verdict)
	}
	switch {
	case stopErr != nil:
		fmt.Fprintf(&b, "\nStopping had problems: %v\n", stopErr)
	case d.stopped:
		b.WriteString("\nEnvoy, the bulkhead daemon and the upstreams have stopped.\n")
	}
	_, _ = io.WriteString(d.out, b.String())
}

// stopLine says what became of the requests in flight when traffic
// stopped; cancelled are those cut short (the rest finished and are
// counted as answered or failed).
func (d *demo) stopLine(cancelled int) string {
	switch {
	case d.inFlightAtStop == 0 && cancelled == 0:
		return "No request was in flight when traffic stopped."
	case cancelled == 0:
		return fmt.Sprintf("%d requests were in flight when traffic stopped: all finished and are counted above.", d.inFlightAtStop)
	default:
		return fmt.Sprintf("%d requests were in flight when traffic stopped: %d finished and are counted above, %d were cancelled %s.",
			d.inFlightAtStop, max(d.inFlightAtStop-cancelled, 0), cancelled, d.drainCut)
	}
}

// bulkheadRejections counts responses that carry x-bulkhead-reason.
func bulkheadRejections(s testbed.Stats) int {
	n := 0
	for _, c := range s.ByReason {
		n += c
	}
	return n
}

// otherErrors counts failures that are not bulkhead rejections: transport
// errors and 5xx without x-bulkhead-reason.
func otherErrors(s testbed.Stats) int {
	return max(s.Errors()-bulkheadRejections(s), 0)
}

// fmtReasons formats counts as "a=1 b=2" in a stable order.
func fmtReasons(m map[string]float64, num string) string {
	var parts []string
	seen := map[string]bool{}
	order := append(append([]string{}, reasons...), "critical", "normal", "best_effort")
	for _, k := range order {
		if v, ok := m[k]; ok && v > 0 {
			parts = append(parts, fmt.Sprintf("%s="+num, k, v))
			seen[k] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if v := m[k]; !seen[k] && v > 0 {
			parts = append(parts, fmt.Sprintf("%s="+num, k, v))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// fmtPeak prints an upstream's peak concurrency, "?" when unknown.
func fmtPeak(n int, known bool) string {
	if !known || n < 0 {
		return "?"
	}
	return fmt.Sprint(n)
}

func fmtNum(x float64) string { return fmt.Sprintf("%.0f", x) }

func fmtSeconds(d time.Duration) string {
	return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
}

// fmtDur prints a latency compactly: 0.4ms, 12ms, 2.01s; "-" for none.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}
