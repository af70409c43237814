package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// The heartbeat phase measures what heartbeat leases cost: the same
// configuration (the shipped bootstrap and a daemon of its own) with
// heartbeats on and off, and on with the periodic entries sent like the end
// entries (one unbuffered logger: one gRPC message each), under two mixes. Short requests never live long
// enough for a periodic entry: what they show is what the heartbeat mode
// costs every request (Envoy's flush timer per stream, the daemon's lease
// bookkeeping). Long requests each send about LongDelay/interval periodic
// entries: what they show is the cost of a heartbeat itself.

// The mixes of the heartbeat phase (Phase.Mix).
const (
	MixShort = "short" // open loop at a fixed rate, the upstream answering in ShortDelay
	MixLong  = "long"  // LongConns requests always in flight, the upstream answering in LongDelay
)

// LoopHeartbeat is Phase.Loop of the heartbeat phase's measurements.
const LoopHeartbeat = "heartbeat"

// fallbackShortRate is the short mix's rate when the closed loop did not
// measure the bulkhead (-loops=false, or -configs without it): a rate two
// shared cores carry with room to spare.
const fallbackShortRate = 1000

// HeartbeatPlan is how long and how hard the heartbeat phase runs.
type HeartbeatPlan struct {
	// Rounds per setting; the settings alternate (on, single log, off, on,
	// ...) within each mix, round by round.
	Rounds int `json:"rounds"`
	// The short mix: an open loop (the plan's OpenConns connections) at
	// Rate, or, when Rate is 0, at half the bulkhead's median closed-loop
	// throughput (fallbackShortRate without one).
	ShortDelay  time.Duration `json:"short_delay_ns"`
	Rate        float64       `json:"short_rate,omitempty"`
	ShortWarmup time.Duration `json:"short_warmup_ns"`
	ShortWindow time.Duration `json:"short_window_ns"`
	// The long mix: LongConns connections sending back to back, their first
	// requests spread over LongDelay, so that requests end at an even pace.
	LongDelay  time.Duration `json:"long_delay_ns"`
	LongConns  int           `json:"long_connections"`
	LongWarmup time.Duration `json:"long_warmup_ns"`
	LongWindow time.Duration `json:"long_window_ns"`
}

func fullHeartbeatPlan() *HeartbeatPlan {
	return &HeartbeatPlan{
		Rounds:     3,
		ShortDelay: time.Millisecond, ShortWarmup: time.Second, ShortWindow: 3 * time.Second,
		// Warm-up: the staggered starts (2 s) and the first heartbeat (1 s).
		LongDelay: 2 * time.Second, LongConns: 200, LongWarmup: 3 * time.Second, LongWindow: 6 * time.Second,
	}
}

func quickHeartbeatPlan() *HeartbeatPlan {
	return &HeartbeatPlan{
		Rounds:     3,
		ShortDelay: time.Millisecond, ShortWarmup: 500 * time.Millisecond, ShortWindow: 1500 * time.Millisecond,
		LongDelay: 2 * time.Second, LongConns: 200, LongWarmup: 2500 * time.Millisecond, LongWindow: 4 * time.Second,
	}
}

// shortRate is the short mix's rate: the plan's, else half the bulkhead's
// median closed-loop throughput, else fallbackShortRate.
func (hp *HeartbeatPlan) shortRate(bulkheadMedian float64) float64 {
	switch {
	case hp.Rate > 0:
		return hp.Rate
	case bulkheadMedian > 0:
		return math.Round(bulkheadMedian / 2)
	}
	return fallbackShortRate
}

// runHeartbeat measures e.heartbeat (on, on with a single logger, off)
// round by round, each mix in turn, the settings alternating within it. Every measurement is a
// Phase with Loop LoopHeartbeat.
func (e *env) runHeartbeat(ctx context.Context, plan Plan, rate float64) ([]Phase, error) {
	hp := plan.Heartbeat
	var phases []Phase
	for round := 1; round <= hp.Rounds; round++ {
		for _, mix := range []string{MixShort, MixLong} {
			for _, st := range e.heartbeat {
				if err := ctx.Err(); err != nil {
					return phases, err
				}
				p := Phase{Loop: LoopHeartbeat, Mix: mix, Round: round}
				var load func(marker) loadStats
				switch mix {
				case MixShort:
					p.TargetRPS, p.Conns = rate, plan.OpenConns
					load = func(mark marker) loadStats {
						return runOpenPath(ctx, st.addr, delayPath(hp.ShortDelay), rate, plan.OpenConns,
							hp.ShortWarmup, hp.ShortWindow, plan.OpenGrace, mark)
					}
				case MixLong:
					p.Conns = hp.LongConns
					load = func(mark marker) loadStats {
						return runClosedPath(ctx, st.addr, delayPath(hp.LongDelay), hp.LongConns, hp.LongDelay,
							hp.LongWarmup, hp.LongWindow, mark)
					}
				}
				p = e.measure(ctx, st, p, load)
				p.Problems = append(p.Problems, heartbeatProblems(p)...)
				e.log.Info("heartbeat cost", "config", p.Config, "mix", mix, "round", round, "rps", p.RPS,
					"daemon_us_per_request", p.CPU["sidecar"].UsPerRequest, "envoy_us_per_request", p.CPU["envoy"].UsPerRequest,
					"periodic_entries", periodicEntries(p))
				phases = append(phases, p)
			}
		}
	}
	return phases, nil
}

// periodicResult is the result label of the periodic entries that renewed
// a permit in bulkhead_access_log_entries_total.
const periodicResult = string(permit.EntryRenewed)

// periodicEntries is the periodic entries of a measurement: those that
// renewed a permit, and those that came after their request's end entry
// (late: with the shipped form, periodic entries are batched on a logger of
// their own, end entries are not).
func periodicEntries(p Phase) int64 {
	return p.AccessLog[periodicResult] + p.AccessLog[string(permit.EntryLate)]
}

// heartbeatProblems are signs that a heartbeat measurement does not
// measure what it says: periodic entries with heartbeats off, none for
// long requests with heartbeats on, or permits reclaimed under requests.
func heartbeatProblems(p Phase) []string {
	var out []string
	on := p.Config != HeartbeatOff
	periodic := p.AccessLog[periodicResult]
	switch {
	case !on && periodic > 0:
		out = append(out, fmt.Sprintf("%d periodic entries with heartbeats off", periodic))
	case on && p.Mix == MixLong && periodic == 0:
		out = append(out, "no periodic entry with heartbeats on: Envoy sends none")
	}
	for _, res := range []permit.EntryResult{permit.EntryAdopted, permit.EntryDuplicate, permit.EntryUnknown} {
		if n := p.AccessLog[string(res)]; n > 0 {
			out = append(out, fmt.Sprintf("%d access-log entries %s", n, res))
		}
	}
	return out
}
