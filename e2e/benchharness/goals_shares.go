package main

import (
	"fmt"
	"slices"
	"strings"
)

// The goals of shares (issue 26), mode auto: far from the limit
// (SharesFar, the load's concurrency a few percent of the limit) against
// the floor, Envoy alone; near the limit (SharesNear in the near phase,
// the upstream's requests in flight near the limit, where mode auto runs
// strict permits) against the bulkhead as shipped with the same limit and
// load (NearStrict); and the rejections of every shares configuration's
// phases whose demand is at most half the limit (SharesFar's, SharesHalf's
// closed loop at 50%, the open loops).

// The bounds of shares (issue 26).
const (
	// minSharesThroughput: of the floor's (closed loop, medians).
	minSharesThroughput = 0.9
	// maxSharesEnvoyCPU: Envoy's CPU per request, of the floor's.
	maxSharesEnvoyCPU = 1.1
	// minNearThroughput and maxNearEnvoyCPU: near the limit, of the
	// bulkhead's as shipped with the same limit (NearStrict): the bounds
	// the bulkhead's own goals hold it to against the no-op ext_authz.
	minNearThroughput = 0.95
	maxNearEnvoyCPU   = 1.05
	// maxSharesRejected: requests not answered 200 (the share's circuit
	// breaker's 503s) at most half the limit, of the requests.
	maxSharesRejected = 0.001
	// halfLimit: the demand, of the limit, up to which a share must not
	// overflow while the mesh has room.
	halfLimit = 0.5
)

// sharesGoals are the goals of shares.
func (r *Results) sharesGoals() []Goal {
	return []Goal{r.sharesThroughputGoal(), r.sharesEnvoyCPUGoal(), r.nearThroughputGoal(), r.nearEnvoyCPUGoal(), r.nearSwitchGoal(),
		r.sharesRejectedGoal()}
}

func (r *Results) sharesThroughputGoal() Goal {
	g := Goal{Name: "Throughput with shares (auto) far from the limit, closed loop",
		Target: fmt.Sprintf(">= %.1fx the floor's, Envoy alone (median of the rounds)", minSharesThroughput)}
	s, f := r.closedThroughput(SharesFar), r.closedThroughput(Floor)
	if s.Median <= 0 || f.Median <= 0 {
		return g
	}
	per := roundRatios(r.closedRounds(SharesFar), r.closedRounds(Floor), rps)
	g.Measured = fmt.Sprintf("%.2fx (median %s vs %s req/s, [min-max] of %d and %d rounds); round by round %s",
		s.Median/f.Median, s.format("%.0f"), f.format("%.0f"), s.Rounds, f.Rounds, per.format("%.2fx"))
	g.Met = verdict(s.Median/f.Median >= minSharesThroughput)
	g.Note = joinNote(spreadNoteOf(SharesFar, s.Spread, Floor, f.Spread), onShares(r.closedRounds(SharesFar)))
	if b := r.medianClosed(Bulkhead); b > 0 {
		g.Note = joinNote(g.Note, fmt.Sprintf("the bulkhead strict: %.2fx the floor", b/f.Median))
	}
	if h := r.medianClosed(SharesHalf); h > 0 {
		g.Note = joinNote(g.Note, fmt.Sprintf("%s (closed loop at 50%% of its limit): %.2fx the floor", SharesHalf, h/f.Median))
	}
	return g
}

func (r *Results) sharesEnvoyCPUGoal() Goal {
	g := Goal{Name: "Envoy CPU per request with shares (auto) far from the limit",
		Target: fmt.Sprintf("<= %.1fx the floor's (%s, threads' counters, median of the rounds)", maxSharesEnvoyCPU, atHalf)}
	sRounds, fRounds := r.openRounds(SharesFar, BaseCommon, lagLoad), r.openRounds(Floor, BaseCommon, lagLoad)
	s, f := figureSpread(sRounds, envoyUs), figureSpread(fRounds, envoyUs)
	if s.Median <= 0 || f.Median <= 0 {
		return g
	}
	per := roundRatios(sRounds, fRounds, envoyUs)
	g.Measured = fmt.Sprintf("%.2fx (%s vs %s us per request, median [min-max]); round by round %s",
		s.Median/f.Median, s.format("%.1f"), f.format("%.1f"), per.format("%.2fx"))
	g.Met = verdict(s.Median/f.Median <= maxSharesEnvoyCPU)
	g.Note = joinNote(spreadNoteOf(SharesFar, s, Floor, f), onShares(sRounds))
	if b := figureSpread(r.openRounds(Bulkhead, BaseCommon, lagLoad), envoyUs); b.Median > 0 {
		g.Note = joinNote(g.Note, fmt.Sprintf("the bulkhead strict: %.2fx the floor", b.Median/f.Median))
	}
	if x, y := r.open(SharesFar, BaseFloor, lagLoad), r.open(Floor, BaseFloor, lagLoad); x != nil && y != nil {
		if a, ok := envoyUs(x); ok {
			if b, ok := envoyUs(y); ok {
				g.Note = joinNote(g.Note, fmt.Sprintf("at 50%% of the floor's maximum (%.0f req/s, one round) %.2fx (%.1f vs %.1f us)", x.TargetRPS, a/b, a, b))
			}
		}
	}
	cs, cf := figureSpread(r.closedRounds(SharesFar), envoyUs), figureSpread(r.closedRounds(Floor), envoyUs)
	if cs.Median > 0 && cf.Median > 0 {
		g.Note = joinNote(g.Note, fmt.Sprintf("closed loop (saturation) %.2fx (%.1f vs %.1f us, medians)", cs.Median/cf.Median, cs.Median, cf.Median))
	}
	return g
}

// nearThroughputGoal: near the limit mode auto runs strict permits; its
// throughput is the bulkhead's as shipped.
func (r *Results) nearThroughputGoal() Goal {
	return r.nearGoal(nearFigure{name: "Throughput", bound: minNearThroughput, atLeast: true, of: rps,
		target:   "the bulkhead's as shipped with the same limit and load (%s; median of the rounds)",
		measured: "%.2fx (median %s vs %s req/s)", format: "%.0f"})
}

func (r *Results) nearEnvoyCPUGoal() Goal {
	return r.nearGoal(nearFigure{name: "Envoy CPU per request", bound: maxNearEnvoyCPU, of: envoyUs,
		target:   "the bulkhead's as shipped with the same limit and load (%s; threads' counters, median of the rounds)",
		measured: "%.2fx (%s vs %s us per request, median [min-max])", format: "%.1f"})
}

// nearFigure is one figure near the limit, shares against strict.
type nearFigure struct {
	name             string
	bound            float64
	atLeast          bool // the ratio must be at least bound (else at most)
	of               func(*Phase) (float64, bool)
	target, measured string // formats: the strict twin's name; ratio, shares', strict's
	format           string // of one figure
}

// nearGoal is f near the limit: SharesNear against NearStrict, met when
// every round ended strict and the medians' ratio is within f.bound.
func (r *Results) nearGoal(f nearFigure) Goal {
	cmp := "<="
	if f.atLeast {
		cmp = ">="
	}
	g := Goal{Name: f.name + " with shares (auto) near the limit, closed loop",
		Target: fmt.Sprintf("strict permits, and %s %.2fx "+f.target, cmp, f.bound, NearStrict)}
	nRounds, bRounds := r.nearRounds(SharesNear), r.nearRounds(NearStrict)
	n, b := figureSpread(nRounds, f.of), figureSpread(bRounds, f.of)
	if n.Median <= 0 || b.Median <= 0 {
		return g
	}
	ratio := n.Median / b.Median
	strict, what := ranStrict(nRounds)
	g.Measured = fmt.Sprintf(f.measured+"; round by round %s; %s",
		ratio, n.format(f.format), b.format(f.format), roundRatios(nRounds, bRounds, f.of).format("%.2fx"), what)
	within := ratio <= f.bound
	if f.atLeast {
		within = ratio >= f.bound
	}
	g.Met = verdict(strict && within)
	g.Note = spreadNoteOf(SharesNear, n, NearStrict, b)
	return g
}

// nearSwitchGoal reports what the switch to strict permits costs: the
// first nearSwitch of load from idle near the limit, against the strict
// twin's.
func (r *Results) nearSwitchGoal() Goal {
	g := Goal{Name: "The switch to strict permits near the limit, from idle", ReportOnly: true,
		Target: fmt.Sprintf("reported: the first %v of load near the limit, requests not answered 200 and throughput, against %s's", nearSwitch, NearStrict)}
	nRounds, bRounds := r.loopRounds(LoopNearSwitch, SharesNear), r.loopRounds(LoopNearSwitch, NearStrict)
	if len(nRounds) == 0 || len(bRounds) == 0 {
		return g
	}
	bad := func(rounds []*Phase) Spread {
		return figureSpread(rounds, func(p *Phase) (float64, bool) {
			return 100 * float64(p.Errors+p.NonOK) / float64(max(p.Requests, 1)), p.Requests > 0
		})
	}
	ok := func(p *Phase) (float64, bool) {
		return float64(p.Requests-p.Errors-p.NonOK) / p.Seconds, p.Requests > 0 && p.Seconds > 0
	}
	switches := figureSpread(nRounds, func(p *Phase) (float64, bool) {
		return sharesOf(p, func(s *SharesFigures) float64 { return float64(s.ToStrict) })
	})
	overflows := figureSpread(nRounds, func(p *Phase) (float64, bool) {
		return sharesOf(p, func(s *SharesFigures) float64 { return float64(s.Overflows) })
	})
	g.Measured = fmt.Sprintf("%s%% of the requests not 200 (%s: %s%%); 200s %s vs %s a second; share overflows %s, switches to strict %s per window; median [min-max] of %d rounds",
		bad(nRounds).format("%.2f"), NearStrict, bad(bRounds).format("%.2f"), figureSpread(nRounds, ok).format("%.0f"),
		figureSpread(bRounds, ok).format("%.0f"), overflows.format("%.0f"), switches.format("%.0f"), len(nRounds))
	return g
}

// sharesRejectedGoal: over every phase of a shares configuration whose
// demand was at most half its limit, the requests not answered 200.
func (r *Results) sharesRejectedGoal() Goal {
	g := Goal{Name: "Rejections with shares (auto) at <= 50% of the limit",
		Target: fmt.Sprintf("<= %.1f%% of the requests of each configuration (a share that overflows while the mesh has room; every phase of %s, %s and %s "+
			"whose demand is at most half the limit, every round)", 100*maxSharesRejected, SharesFar, SharesHalf, SharesNear)}
	var phases, near []*Phase
	for i := range r.Phases {
		p := &r.Phases[i]
		if p.Shares == nil || p.Shares.Limit <= 0 || p.Requests <= 0 || !slices.Contains([]string{SharesFar, SharesHalf, SharesNear}, p.Config) {
			continue
		}
		if p.Shares.Demand <= halfLimit*float64(p.Shares.Limit) {
			phases = append(phases, p)
		} else {
			near = append(near, p)
		}
	}
	if len(phases) == 0 {
		return g
	}
	rejected := func(p *Phase) int64 { return p.Errors + p.NonOK }
	var bad, total, overflows int64
	type count struct{ bad, total int64 }
	by := map[string]*count{}
	for _, p := range phases {
		bad, total, overflows = bad+rejected(p), total+p.Requests, overflows+p.Shares.Overflows
		if by[p.Config] == nil {
			by[p.Config] = &count{}
		}
		by[p.Config].bad, by[p.Config].total = by[p.Config].bad+rejected(p), by[p.Config].total+p.Requests
	}
	frac := float64(bad) / float64(total)
	worstConfig := 0.0
	var each []string
	for _, c := range []string{SharesFar, SharesHalf, SharesNear} {
		if n := by[c]; n != nil {
			f := float64(n.bad) / float64(n.total)
			worstConfig = max(worstConfig, f)
			each = append(each, fmt.Sprintf("%s %.3f%% (%d of %d)", c, 100*f, n.bad, n.total))
		}
	}
	worst := slices.MaxFunc(phases, func(a, b *Phase) int {
		return cmpFloat(float64(rejected(a))/float64(a.Requests), float64(rejected(b))/float64(b.Requests))
	})
	// The tightest share for its demand: the headroom the goal rests on.
	tight := slices.MinFunc(phases, func(a, b *Phase) int { return cmpFloat(headroom(a), headroom(b)) })
	g.Measured = fmt.Sprintf("%s; all together %.3f%% (%d of %d requests, %d phases; the share's circuit breaker overflowed %d times); "+
		"worst phase %s: %.3f%% (%d of %d) at %.0f req/s, demand %.1f of %d, share %.0f; tightest share %.0f for a demand of %.1f "+
		"(headroom %.1fx) in %s at %.0f req/s",
		strings.Join(each, ", "), 100*frac, bad, total, len(phases), overflows,
		describe(worst), 100*float64(rejected(worst))/float64(worst.Requests), rejected(worst), worst.Requests, worst.RPS,
		worst.Shares.Demand, worst.Shares.Limit, worst.Shares.Share,
		tight.Shares.Share, tight.Shares.Demand, headroom(tight), describe(tight), tight.RPS)
	g.Met = verdict(worstConfig <= maxSharesRejected)
	if len(near) > 0 {
		var nb, nt int64
		for _, p := range near {
			nb, nt = nb+rejected(p), nt+p.Requests
		}
		g.Note = fmt.Sprintf("above half the limit (%d phases, strict permits once switched): %.3f%% (%d of %d)", len(near),
			100*float64(nb)/float64(nt), nb, nt)
	}
	return g
}

// nearRounds are config's near-phase rounds (steady state), in round
// order.
func (r *Results) nearRounds(config string) []*Phase { return r.loopRounds(LoopNear, config) }

// loopRounds are config's rounds of loop, in round order.
func (r *Results) loopRounds(loop, config string) []*Phase {
	var out []*Phase
	for i, p := range r.Phases {
		if p.Loop == loop && p.Config == config {
			out = append(out, &r.Phases[i])
		}
	}
	slices.SortStableFunc(out, func(a, b *Phase) int { return a.Round - b.Round })
	return out
}

// headroom is a phase's share over its demand (0 without a share: the
// phase ran strict at its end).
func headroom(p *Phase) float64 {
	if p.Shares.Demand <= 0 {
		return p.Shares.Share
	}
	return p.Shares.Share / p.Shares.Demand
}

func describe(p *Phase) string { return p.Config + ", " + phaseName(*p) }

// onShares says how a configuration's phases admitted: the Checks that
// reached the daemon and the requests on the share route, per request
// (medians), and the rounds that ended on strict permits.
func onShares(rounds []*Phase) string {
	checks := figureSpread(rounds, func(p *Phase) (float64, bool) {
		return sharesOf(p, func(s *SharesFigures) float64 { return s.ChecksPerRequest })
	})
	route := figureSpread(rounds, func(p *Phase) (float64, bool) {
		return sharesOf(p, func(s *SharesFigures) float64 { return s.ShareRoute })
	})
	if checks.Rounds == 0 {
		return ""
	}
	out := fmt.Sprintf("%s Checks and %s requests on the share route per request (median [min-max])", checks.format("%.3f"), route.format("%.3f"))
	if strict, _ := ranStrict(rounds); strict {
		out += "; every round ended on strict permits"
	}
	return out
}

// ranStrict reports whether every one of rounds ended on strict permits
// (bulkhead_shares_mode 0) with most requests through ext_authz, and says
// how they ran.
func ranStrict(rounds []*Phase) (bool, string) {
	var modes []string
	all := len(rounds) > 0
	for _, p := range rounds {
		if p.Shares == nil {
			all = false
			modes = append(modes, "?")
			continue
		}
		m := "shares"
		if p.Shares.Mode == 0 {
			m = "strict"
		}
		modes = append(modes, fmt.Sprintf("%s (%.2f Checks/req)", m, p.Shares.ChecksPerRequest))
		if p.Shares.Mode != 0 || p.Shares.ChecksPerRequest < 0.9 {
			all = false
		}
	}
	return all, "mode at each round's end: " + strings.Join(modes, ", ")
}

func sharesOf(p *Phase, get func(*SharesFigures) float64) (float64, bool) {
	if p.Shares == nil || p.Requests <= 0 {
		return 0, false
	}
	return get(p.Shares), true
}
