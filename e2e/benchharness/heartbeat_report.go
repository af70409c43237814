package main

import (
	"fmt"
	"strings"
)

// HeartbeatSetting is one setting (on or off) of one mix of the heartbeat
// phase: medians over its rounds.
type HeartbeatSetting struct {
	Rounds int     `json:"rounds"`
	RPS    float64 `json:"rps"`
	// CPU microseconds per request completed in the window, from the
	// threads' nanosecond counters (CPUUse.UsPerRequest).
	DaemonUs float64 `json:"daemon_us_per_request"`
	EnvoyUs  float64 `json:"envoy_us_per_request"`
	// PeriodicPerRequest: periodic entries per request
	// (bulkhead_access_log_entries_total{result="renewed"} and
	// {result="late"}: see periodicEntries).
	PeriodicPerRequest float64 `json:"periodic_entries_per_request"`
}

// HeartbeatVsOff is a setting with heartbeats on against heartbeats off.
type HeartbeatVsOff struct {
	// DaemonRatio and EnvoyRatio are on / off of the medians; 0 when a
	// setting was not measured.
	DaemonRatio float64 `json:"daemon_ratio"`
	EnvoyRatio  float64 `json:"envoy_ratio"`
	// Per periodic entry: the difference of the medians (on - off) over the
	// periodic entries per request; nil without periodic entries.
	DaemonUsPerPeriodic *float64 `json:"daemon_us_per_periodic_entry,omitempty"`
	EnvoyUsPerPeriodic  *float64 `json:"envoy_us_per_periodic_entry,omitempty"`
}

// HeartbeatCost is what heartbeats cost under one mix: as shipped (On,
// periodic entries batched on a logger of their own) and, when measured,
// with a single unbuffered logger (Single).
type HeartbeatCost struct {
	Mix string           `json:"mix"`
	On  HeartbeatSetting `json:"on"`
	Off HeartbeatSetting `json:"off"`
	HeartbeatVsOff
	Single *HeartbeatSingleLog `json:"single_log,omitempty"`
}

// HeartbeatSingleLog is heartbeats on with the periodic entries on the
// release logger, unbuffered (HeartbeatSingle), against off.
type HeartbeatSingleLog struct {
	Setting HeartbeatSetting `json:"setting"`
	HeartbeatVsOff
}

// heartbeatCosts aggregates the heartbeat phase's measurements, one cost
// per mix measured, short first. Measurements that completed no request
// are left out.
func heartbeatCosts(phases []Phase) []HeartbeatCost {
	var out []HeartbeatCost
	for _, mix := range []string{MixShort, MixLong} {
		c := HeartbeatCost{Mix: mix, On: heartbeatSetting(phases, mix, HeartbeatOn), Off: heartbeatSetting(phases, mix, HeartbeatOff)}
		single := heartbeatSetting(phases, mix, HeartbeatSingle)
		if c.On.Rounds == 0 && c.Off.Rounds == 0 && single.Rounds == 0 {
			continue
		}
		c.HeartbeatVsOff = vsOff(c.On, c.Off)
		if single.Rounds > 0 {
			c.Single = &HeartbeatSingleLog{Setting: single, HeartbeatVsOff: vsOff(single, c.Off)}
		}
		out = append(out, c)
	}
	return out
}

func vsOff(on, off HeartbeatSetting) HeartbeatVsOff {
	var v HeartbeatVsOff
	if on.Rounds == 0 || off.Rounds == 0 {
		return v
	}
	if off.DaemonUs > 0 {
		v.DaemonRatio = round3(on.DaemonUs / off.DaemonUs)
	}
	if off.EnvoyUs > 0 {
		v.EnvoyRatio = round3(on.EnvoyUs / off.EnvoyUs)
	}
	if n := on.PeriodicPerRequest; n > 0 {
		d, e := round3((on.DaemonUs-off.DaemonUs)/n), round3((on.EnvoyUs-off.EnvoyUs)/n)
		v.DaemonUsPerPeriodic, v.EnvoyUsPerPeriodic = &d, &e
	}
	return v
}

func heartbeatSetting(phases []Phase, mix, config string) HeartbeatSetting {
	var rps, daemon, envoy, periodic []float64
	for _, p := range phases {
		if p.Loop != LoopHeartbeat || p.Mix != mix || p.Config != config || p.Requests <= 0 {
			continue
		}
		rps = append(rps, p.RPS)
		daemon = append(daemon, p.CPU["sidecar"].UsPerRequest)
		envoy = append(envoy, p.CPU["envoy"].UsPerRequest)
		periodic = append(periodic, float64(periodicEntries(p))/float64(p.Requests))
	}
	return HeartbeatSetting{Rounds: len(rps), RPS: median(rps), DaemonUs: round3(median(daemon)),
		EnvoyUs: round3(median(envoy)), PeriodicPerRequest: round3(median(periodic))}
}

// heartbeatGoal is the goal line: the extra daemon CPU per request of the
// short mix (the bench's mix), the long mix beside it.
func heartbeatGoal(costs []HeartbeatCost) Goal {
	g := Goal{Name: "Heartbeats: extra daemon CPU at the bench's mix", Target: "< 5%"}
	for _, c := range costs {
		if c.DaemonRatio <= 0 {
			continue
		}
		what := fmt.Sprintf("%+.1f%% (%.1f vs %.1f us per request, heartbeats on vs off, median of %d and %d rounds); Envoy %s",
			100*(c.DaemonRatio-1), c.On.DaemonUs, c.Off.DaemonUs, c.On.Rounds, c.Off.Rounds, percent(c.EnvoyRatio))
		switch c.Mix {
		case MixShort:
			g.Measured = "short requests: " + what
			g.Met = verdict(c.DaemonRatio < 1.05)
		case MixLong:
			if c.DaemonUsPerPeriodic != nil {
				what += fmt.Sprintf("; %.2f periodic entries per request, %.1f us of daemon CPU per periodic entry",
					c.On.PeriodicPerRequest, *c.DaemonUsPerPeriodic)
			}
			if s := c.Single; s != nil && s.DaemonUsPerPeriodic != nil {
				what += fmt.Sprintf(" (%.1f with a single unbuffered logger; Envoy %s vs %s)",
					*s.DaemonUsPerPeriodic, optional(c.EnvoyUsPerPeriodic), optional(s.EnvoyUsPerPeriodic))
			}
			g.Note = "long requests: " + what
		}
	}
	return g
}

func percent(ratio float64) string {
	if ratio <= 0 {
		return "not measured"
	}
	return fmt.Sprintf("%+.1f%%", 100*(ratio-1))
}

// writeHeartbeat writes the heartbeat phase's section of results.md.
func writeHeartbeat(b *strings.Builder, r *Results) {
	hp := r.Plan.Heartbeat
	if hp == nil || len(r.Heartbeat) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## Heartbeat cost\n\nThe shipped configuration with heartbeat leases on (Envoy's periodic access log and the daemon's ")
	p("leases.heartbeat_interval, both 1 s; the periodic entries on a logger of their own, batched) and off (neither), ")
	p("and on with the periodic entries on the release logger, unbuffered like the end entries (single log: one gRPC message each), ")
	p("each with a daemon of its own, rounds alternating. ")
	p("Short: open loop at a fixed rate, the upstream answering in %v (no request lives long enough for a periodic entry: ", hp.ShortDelay)
	p("the heartbeat mode's cost per request). Long: %d requests always in flight, the upstream answering in %v ", hp.LongConns, hp.LongDelay)
	p("(the cost of the periodic entries themselves). CPU per request from the threads' nanosecond counters ")
	p("(/proc/PID/task/*/schedstat), median of the rounds; per periodic entry = (on - off) / periodic entries per request.\n\n")
	p("| mix | load | heartbeats | daemon us/req | vs off | Envoy us/req | vs off | periodic entries / req | daemon us / periodic entry | Envoy us / periodic entry |\n")
	p("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.Heartbeat {
		load := fmt.Sprintf("%d in flight, upstream %v", hp.LongConns, hp.LongDelay)
		if c.Mix == MixShort {
			load = fmt.Sprintf("%.0f req/s, upstream %v", r.heartbeatRate(), hp.ShortDelay)
		}
		row := func(config string, s HeartbeatSetting, v *HeartbeatVsOff) {
			if s.Rounds == 0 {
				return
			}
			if v == nil {
				v = &HeartbeatVsOff{}
			}
			p("| %s | %s | %s | %.1f | %s | %.1f | %s | %.2f | %s | %s |\n", c.Mix, load, heartbeatLabel(config),
				s.DaemonUs, ratioX(v.DaemonRatio), s.EnvoyUs, ratioX(v.EnvoyRatio),
				s.PeriodicPerRequest, optional(v.DaemonUsPerPeriodic), optional(v.EnvoyUsPerPeriodic))
		}
		row(HeartbeatOn, c.On, &c.HeartbeatVsOff)
		if c.Single != nil {
			row(HeartbeatSingle, c.Single.Setting, &c.Single.HeartbeatVsOff)
		}
		row(HeartbeatOff, c.Off, nil)
	}
	p("\nEvery round:\n\n| mix | round | heartbeats | req/s | daemon us/req | Envoy us/req | periodic entries | other load, cores | errors |\n")
	p("|---|---|---|---|---|---|---|---|---|\n")
	for _, ph := range r.Phases {
		if ph.Loop != LoopHeartbeat {
			continue
		}
		p("| %s | %d | %s | %.0f | %.1f | %.1f | %d | %.2f | %d |\n", ph.Mix, ph.Round, heartbeatLabel(ph.Config), ph.RPS,
			ph.CPU["sidecar"].UsPerRequest, ph.CPU["envoy"].UsPerRequest, periodicEntries(ph), ph.OtherLoad, ph.Errors+ph.NonOK)
	}
}

// heartbeatLabel names a heartbeat configuration in the tables.
func heartbeatLabel(config string) string {
	switch config {
	case HeartbeatOn:
		return "on, batched log"
	case HeartbeatSingle:
		return "on, single log"
	case HeartbeatOff:
		return "off"
	}
	return config
}

// heartbeatRate is the short mix's rate in this run.
func (r *Results) heartbeatRate() float64 {
	for _, ph := range r.Phases {
		if ph.Loop == LoopHeartbeat && ph.Mix == MixShort {
			return ph.TargetRPS
		}
	}
	return 0
}

func ratioX(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.3fx", v)
}

func optional(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *v)
}
