package main

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Plan is how long and how hard each phase runs.
type Plan struct {
	Quick bool `json:"quick"`
	// Closed loop: Rounds rounds over every configuration, each
	// ClosedWarmup then ClosedWindow measured, with ClosedConns connections.
	Rounds       int           `json:"closed_rounds"`
	ClosedConns  int           `json:"closed_connections"`
	ClosedWarmup time.Duration `json:"closed_warmup_ns"`
	ClosedWindow time.Duration `json:"closed_window_ns"`
	// Open loop: at each fraction of each rate base (see BaseCommon), every
	// configuration in turn, OpenConns connections; OpenRounds rounds at
	// the common base (the report keeps each configuration's median round),
	// one at the floor's.
	Fractions  []float64     `json:"load_fractions"`
	OpenRounds int           `json:"open_rounds"`
	OpenConns  int           `json:"open_connections"`
	OpenWarmup time.Duration `json:"open_warmup_ns"`
	OpenWindow time.Duration `json:"open_window_ns"`
	OpenGrace  time.Duration `json:"open_grace_ns"`
	// UpstreamDelay is the upstream's fixed service time.
	UpstreamDelay time.Duration `json:"upstream_delay_ns"`
	// Heartbeat is the heartbeat phase's plan; nil: no heartbeat phase.
	Heartbeat *HeartbeatPlan `json:"heartbeat,omitempty"`
	// Micro-benchmarks: -benchtime and -count.
	BenchTime  string `json:"bench_time"`
	BenchCount int    `json:"bench_count"`
}

func fullPlan() Plan {
	return Plan{
		Rounds: 5, ClosedConns: 32, ClosedWarmup: time.Second, ClosedWindow: 3 * time.Second,
		Fractions: []float64{0.25, 0.50, 0.75}, OpenRounds: 5, OpenConns: 64,
		OpenWarmup: 500 * time.Millisecond, OpenWindow: 3 * time.Second, OpenGrace: 2 * time.Second,
		Heartbeat: fullHeartbeatPlan(),
		BenchTime: "300ms", BenchCount: 5,
	}
}

func quickPlan() Plan {
	return Plan{
		Quick:  true,
		Rounds: 1, ClosedConns: 32, ClosedWarmup: 500 * time.Millisecond, ClosedWindow: 2 * time.Second,
		Fractions: []float64{0.25, 0.50, 0.75}, OpenRounds: 1, OpenConns: 64,
		OpenWarmup: 500 * time.Millisecond, OpenWindow: 2 * time.Second, OpenGrace: time.Second,
		Heartbeat: quickHeartbeatPlan(),
		BenchTime: "100ms", BenchCount: 1,
	}
}

// The rate bases of the open loop. The issue asks for fractions of the
// floor's maximum; on a small machine those can exceed what any ext_authz
// configuration carries at all, so the fractions are also taken of the
// common maximum (the lowest configuration's), a rate every configuration
// can carry, where their latencies compare like for like.
const (
	BaseFloor  = "floor"
	BaseCommon = "common"
)

// runLoad measures every configuration of e: the closed loop first, then
// the open loop at each fraction of each rate base. Configurations take
// turns within each round and each rate, so that a slow minute on the
// shared machine does not land on one configuration only.
func (e *env) runLoad(ctx context.Context, plan Plan) ([]Phase, error) {
	var phases []Phase
	for round := 1; round <= plan.Rounds; round++ {
		for _, st := range e.stacks {
			if err := ctx.Err(); err != nil {
				return phases, err
			}
			if st.spec.near {
				phases = append(phases, e.runNear(ctx, plan, st, round)...)
				continue
			}
			p := e.measure(ctx, st, Phase{Loop: "closed", Round: round, Conns: plan.ClosedConns},
				func(mark marker) loadStats {
					return runClosed(ctx, st.addr, plan.ClosedConns, plan.ClosedWarmup, plan.ClosedWindow, mark)
				})
			e.log.Info("closed loop", "config", p.Config, "round", round, "rps", p.RPS,
				"p99_ms", p.Latency.P99Ms, "errors", p.Errors+p.NonOK)
			phases = append(phases, p)
		}
	}
	// The rate bases are medians of the rounds, like every figure the
	// goals use: one lucky round does not set a rate the others miss.
	closed := &Results{Phases: phases}
	maxima, common := map[string]float64{}, math.Inf(1)
	for _, st := range e.stacks {
		if st.spec.near {
			continue
		}
		maxima[st.spec.Name] = closed.medianClosed(st.spec.Name)
		common = min(common, maxima[st.spec.Name])
	}
	if maxima[Floor] <= 0 || common <= 0 {
		return phases, fmt.Errorf("a configuration served nothing in the closed loop: %v", maxima)
	}
	for _, base := range []struct {
		name   string
		rps    float64
		rounds int
	}{{BaseCommon, common, plan.OpenRounds}, {BaseFloor, maxima[Floor], 1}} {
		for round := 1; round <= base.rounds; round++ {
			for _, f := range plan.Fractions {
				rate := f * base.rps
				for _, st := range e.stacks {
					if err := ctx.Err(); err != nil {
						return phases, err
					}
					if st.spec.near || base.name == BaseFloor && (st.spec.diagnostic || st.spec.redisReplicas > 0) {
						continue
					}
					p := e.measure(ctx, st, Phase{Loop: "open", Round: round, Base: base.name, Fraction: f,
						TargetRPS: math.Round(rate), Conns: plan.OpenConns},
						func(mark marker) loadStats {
							return runOpen(ctx, st.addr, rate, plan.OpenConns, plan.OpenWarmup, plan.OpenWindow, plan.OpenGrace, mark)
						})
					e.log.Info("open loop", "config", p.Config, "base", base.name, "round", round, "load", f,
						"target_rps", int(rate), "rps", p.RPS, "p50_ms", p.Latency.P50Ms, "p99_ms", p.Latency.P99Ms)
					phases = append(phases, p)
				}
			}
		}
	}
	return phases, nil
}

// The near phase: SharesNear and its strict twin NearStrict, each with
// the closed loop's connections on a limit of as many, each request
// nearDelay at the upstream so that the connections' requests are in
// flight there (near the limit from the daemon's view, LRS included).
// Between two rounds a configuration runs idle, and mode auto switches
// back to shares: each round measures first the switch (LoopNearSwitch:
// nearSwitch from the load's start, no warm-up), then, at once, the
// steady state (LoopNear: after a warm-up of one second, the closed
// loop's window).
const (
	LoopNear       = "near"
	LoopNearSwitch = "near-switch"
	nearDelay      = 5 * time.Millisecond
	nearSwitch     = 6 * time.Second
)

// runNear measures st's near phase in round: the switch, then the steady
// state.
func (e *env) runNear(ctx context.Context, plan Plan, st *stack, round int) []Phase {
	var out []Phase
	for _, w := range []struct {
		loop           string
		warmup, window time.Duration
	}{{LoopNearSwitch, 0, nearSwitch}, {LoopNear, time.Second, plan.ClosedWindow}} {
		p := e.measure(ctx, st, Phase{Loop: w.loop, Round: round, Conns: plan.ClosedConns},
			func(mark marker) loadStats {
				return runClosedPath(ctx, st.addr, delayPath(nearDelay), plan.ClosedConns, 0, w.warmup, w.window, mark)
			})
		e.log.Info("near the limit", "config", p.Config, "window", w.loop, "round", round, "rps", p.RPS, "p99_ms", p.Latency.P99Ms,
			"errors", p.Errors+p.NonOK)
		out = append(out, p)
	}
	return out
}

// idleMemory reads the daemon's memory before any load.
func (e *env) idleMemory(ctx context.Context) (*DaemonMemory, error) {
	for _, st := range e.stacks {
		if st.metricsURL() == "" {
			continue
		}
		r := e.read(ctx, st, true)
		if r.err != nil {
			return nil, r.err
		}
		m := r.metrics
		return &DaemonMemory{
			RSSBytes: sum(m, "process_resident_memory_bytes"), HeapInuseBytes: sum(m, "go_memstats_heap_inuse_bytes"),
			HeapAllocBytes: sum(m, "go_memstats_heap_alloc_bytes"), Goroutines: sum(m, "go_goroutines"),
		}, nil
	}
	return nil, nil
}
