package main

import (
	"fmt"
	"slices"
)

// Figures over rounds. A figure measured in several rounds is reported as
// the median with its spread (min-max): the median decides the goals, the
// spread says how far to trust it. The best round is shown beside the
// closed loop's median, never instead of it: interference only ever lowers
// throughput, but a best of N picks the luckiest round of each
// configuration, and two configurations' luck differs.

// Spread is one figure over the rounds that measured it.
type Spread struct {
	Rounds int     `json:"rounds"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// spreadOf summarises v (any order); the zero Spread when v is empty.
func spreadOf(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	return Spread{Rounds: len(v), Median: median(v), Min: slices.Min(v), Max: slices.Max(v)}
}

// Width is (max - min) / median: 0.05 means the rounds lie within 5% of
// the median's size. 0 without rounds.
func (s Spread) Width() float64 {
	if s.Median <= 0 {
		return 0
	}
	return (s.Max - s.Min) / s.Median
}

// format writes s as "median [min-max]" with verb for each value; a single
// round is the value alone.
func (s Spread) format(verb string) string {
	if s.Rounds <= 1 {
		return fmt.Sprintf(verb, s.Median)
	}
	return fmt.Sprintf(verb+" ["+verb+"-"+verb+"]", s.Median, s.Min, s.Max)
}

// ClosedThroughput is one configuration's closed-loop throughput over the
// rounds (results.json "closed"): Spread.Median decides, Best is the best
// round (= Spread.Max), shown beside it.
type ClosedThroughput struct {
	Config  string    `json:"config"`
	ByRound []float64 `json:"rps_by_round"`
	Spread
}

// closedRounds are config's closed-loop phases, in round order.
func (r *Results) closedRounds(config string) []*Phase {
	var out []*Phase
	for i, p := range r.Phases {
		if p.Loop == "closed" && p.Config == config {
			out = append(out, &r.Phases[i])
		}
	}
	slices.SortStableFunc(out, func(a, b *Phase) int { return a.Round - b.Round })
	return out
}

// closedThroughput is config's closed-loop req/s over the rounds.
func (r *Results) closedThroughput(config string) ClosedThroughput {
	c := ClosedThroughput{Config: config}
	for _, p := range r.closedRounds(config) {
		c.ByRound = append(c.ByRound, p.RPS)
	}
	c.Spread = spreadOf(c.ByRound)
	return c
}

// medianClosed is config's median closed-loop throughput (0 if none): the
// figure goals and rates derive from.
func (r *Results) medianClosed(config string) float64 { return r.closedThroughput(config).Median }

// bestClosed is config's best closed-loop round (0 if none), shown beside
// the median.
func (r *Results) bestClosed(config string) float64 { return r.closedThroughput(config).Max }

// medianClosedPhase is config's closed-loop round with the median
// throughput (of an even number, the lower of the middle two): the round
// whose latency, CPU and lag the tables show. nil if none.
func (r *Results) medianClosedPhase(config string) *Phase {
	return medianPhase(r.closedRounds(config), func(p *Phase) float64 { return p.RPS })
}

// medianPhase is the phase of rounds with the median key (of an even
// number, the lower of the middle two), or nil. rounds is not modified.
func medianPhase(rounds []*Phase, key func(*Phase) float64) *Phase {
	if len(rounds) == 0 {
		return nil
	}
	s := slices.Clone(rounds)
	slices.SortStableFunc(s, func(a, b *Phase) int { return cmpFloat(key(a), key(b)) })
	return s[(len(s)-1)/2]
}

// openRounds are config's open-loop phases at fraction f of base, in round
// order.
func (r *Results) openRounds(config, base string, f float64) []*Phase {
	var out []*Phase
	for i, p := range r.Phases {
		if p.Loop == "open" && p.Config == config && p.Base == base && p.Fraction == f {
			out = append(out, &r.Phases[i])
		}
	}
	slices.SortStableFunc(out, func(a, b *Phase) int { return a.Round - b.Round })
	return out
}

// figureSpread is get over rounds, leaving out the rounds where get has no
// value (ok false).
func figureSpread(rounds []*Phase, get func(*Phase) (float64, bool)) Spread {
	var v []float64
	for _, p := range rounds {
		if x, ok := get(p); ok {
			v = append(v, x)
		}
	}
	return spreadOf(v)
}

// roundRatios is a/b round by round, over the rounds where both have a
// value (get's ok) and b's is positive. Configurations take turns within a
// round, so a round's ratio compares them under the same interference;
// its spread over the rounds is the ratio's own.
func roundRatios(a, b []*Phase, get func(*Phase) (float64, bool)) Spread {
	return byRound(a, b, get, func(x, y float64) (float64, bool) { return x / y, y > 0 })
}

// roundDiffs is get(a) - get(b) round by round, over the rounds both
// measured (a figure such as a p99, where a difference says more than a
// ratio).
func roundDiffs(a, b []*Phase, get func(*Phase) (float64, bool)) Spread {
	return byRound(a, b, get, func(x, y float64) (float64, bool) { return x - y, true })
}

// byRound is the spread of combine(get(a), get(b)) over the rounds both
// measured and combine accepts.
func byRound(a, b []*Phase, get func(*Phase) (float64, bool), combine func(x, y float64) (float64, bool)) Spread {
	theirs := map[int]float64{}
	for _, p := range b {
		if y, ok := get(p); ok {
			theirs[p.Round] = y
		}
	}
	var v []float64
	for _, p := range a {
		x, ok := get(p)
		y, both := theirs[p.Round]
		if !ok || !both {
			continue
		}
		if c, ok := combine(x, y); ok {
			v = append(v, c)
		}
	}
	return spreadOf(v)
}

// rps is a phase's throughput (closed loop: what decides).
func rps(p *Phase) (float64, bool) { return p.RPS, p.Requests > 0 }

// envoyUs is Envoy's CPU per request from its threads' nanosecond counters.
func envoyUs(p *Phase) (float64, bool) {
	u, ok := p.CPU["envoy"]
	return u.UsPerRequest, ok && p.Requests > 0 && u.UsPerRequest > 0
}

// sidecarUs is the sidecar's CPU per request from its threads' nanosecond
// counters: every daemon replica's together.
func sidecarUs(p *Phase) (float64, bool) {
	u, ok := p.CPU["sidecar"]
	return u.UsPerRequest, ok && p.Requests > 0 && u.UsPerRequest > 0
}

// redisUs is the Redis ledger's server's CPU per request from its threads'
// nanosecond counters.
func redisUs(p *Phase) (float64, bool) {
	u, ok := p.CPU["redis"]
	return u.UsPerRequest, ok && u.UsPerRequest > 0
}

// redisUsAboveIdle is redisUs less the server's idle floor
// (CPUUse.UsAboveIdle); none without a floor.
func redisUsAboveIdle(p *Phase) (float64, bool) {
	u, ok := p.CPU["redis"]
	if !ok || u.UsAboveIdle == nil || u.UsPerRequest <= 0 {
		return 0, false
	}
	return *u.UsAboveIdle, true
}

// allCPUUs is the CPU per request of every process of the configuration
// (Envoy, sidecar, harness), from /proc/PID/stat (ms per 1,000 requests
// = us per request).
func allCPUUs(p *Phase) (float64, bool) {
	total := 0.0
	for _, u := range p.CPU {
		total += u.MsPer1k
	}
	return total, p.Requests > 0 && total > 0
}

// lagP99 and lagWithin2ms are a phase's release-lag p99 (interpolated)
// and its share of lags at most 2 ms (exact: a bucket edge).
func lagP99(p *Phase) (float64, bool) {
	return lagOf(p, func(l *ReleaseLag) float64 { return l.P99Ms })
}
func lagWithin2ms(p *Phase) (float64, bool) {
	return lagOf(p, func(l *ReleaseLag) float64 { return l.Within2ms })
}

func lagOf(p *Phase, get func(*ReleaseLag) float64) (float64, bool) {
	if p.Lag == nil || p.Lag.Releases <= 0 {
		return 0, false
	}
	return get(p.Lag), true
}
