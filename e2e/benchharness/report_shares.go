package main

import (
	"fmt"
	"strings"
)

// writeShares writes the shares section: for each reported phase of a
// configuration with shares, its limit and demand, the mode and share at
// the window's end, the Checks and share-route requests per request, and
// the share's overflows and the requests not answered 200.
func writeShares(b *strings.Builder, r *Results) {
	var phases []*Phase
	for _, ph := range r.reported() {
		if ph.Shares != nil {
			phases = append(phases, ph)
		}
	}
	for _, ph := range r.reportedNear() {
		if ph.Shares != nil {
			phases = append(phases, ph)
		}
	}
	if len(phases) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## Shares\n\nThe bulkhead with `shares: {mode: auto}` (package shares): far from the limit each Envoy admits within a share ")
	p("(its share cluster's circuit breaker, sized over RTDS), with no ext_authz hop and no access-log entry; near it (demand at %.0f%% ", 100*0.6)
	p("of the limit) the daemon switches the bulkhead to strict permits. Demand: the closed loop's connections, or the open loop's rate ")
	p("times its mean latency. At the window's end, from the daemon's /metrics: the mode (bulkhead_shares_mode), the share ")
	p("(bulkhead_shares_limit, the max_requests the Envoy was told), what the Envoy last reported in flight (bulkhead_shares_in_flight, LRS) ")
	p("and the permits held for it. Over the window, per request: the Checks that reached the daemon and the requests Envoy sent on the ")
	p("share route (its /stats); the share's circuit-breaker overflows (upstream_rq_pending_overflow) and the requests not answered 200.\n\n")
	p("| phase | config | limit | demand | mode | share | in flight (LRS) | permits held | Checks / req | share route / req | overflows | not 200 | switches to strict / shares |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, ph := range phases {
		s := ph.Shares
		mode := "shares"
		if s.Mode == 0 {
			mode = "strict"
		}
		p("| %s | %s | %d | %.1f | %s | %.0f | %.0f | %.0f | %.3f | %.3f | %d | %d | %d / %d |\n", phaseName(*ph), ph.Config, s.Limit, s.Demand,
			mode, s.Share, s.InFlight, s.Permits, s.ChecksPerRequest, s.ShareRoute, s.Overflows, ph.Errors+ph.NonOK, s.ToStrict, s.ToShares)
	}
}

// reportedNear are the near phase's phases the tables show: for each
// window (the switch, then the steady state), each configuration's round
// of median throughput.
func (r *Results) reportedNear() []*Phase {
	var out []*Phase
	for _, loop := range []string{LoopNearSwitch, LoopNear} {
		for _, c := range r.Configs {
			if ph := medianPhase(r.loopRounds(loop, c.Name), func(p *Phase) float64 { return p.RPS }); ph != nil {
				out = append(out, ph)
			}
		}
	}
	return out
}
