package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// SharesFigures is what a configuration with shares (configSpec.shares)
// did over a phase's window: from the daemon's /metrics (the bulkhead's
// shares at the window's end, its Checks over the window) and Envoy's
// /stats (the share route's requests and its circuit breaker's overflows
// over the window).
type SharesFigures struct {
	// Limit is the bulkhead's max_concurrent.
	Limit int `json:"limit"`
	// Demand is the load's requests in flight: the closed loop's
	// connections, or the open loop's rate times its mean latency (Little's
	// law, an upper bound: the latency counts from the intended send).
	Demand float64 `json:"demand"`
	// At the window's end: bulkhead_shares_mode (1 shares, 0 strict),
	// bulkhead_shares_limit (Σ max_requests the Envoy was told: the
	// share), bulkhead_shares_in_flight (what the Envoy last reported,
	// LRS) and bulkhead_shares_permits (permits held for the share).
	Mode     float64 `json:"mode"`
	Share    float64 `json:"share"`
	InFlight float64 `json:"in_flight"`
	Permits  float64 `json:"permits"`
	// Over the window: Checks that reached the daemon
	// (bulkhead_admitted_total + bulkhead_rejected_total) and requests
	// Envoy sent on the share route (its cluster's upstream_rq_total),
	// each per request completed; the share's circuit breaker's
	// overflows (upstream_rq_pending_overflow: 503s while the share was
	// full); switches of mode auto.
	ChecksPerRequest float64 `json:"checks_per_request"`
	ShareRoute       float64 `json:"share_route_per_request"`
	Overflows        int64   `json:"share_overflows"`
	ToStrict         int64   `json:"switches_to_strict"`
	ToShares         int64   `json:"switches_to_shares"`
	// ShareCluster is every counter of the share cluster that moved over
	// the window (Envoy's /stats, the "cluster.<share cluster>." prefix
	// left out; gauges among them as their change); Overflows sums those
	// named *_overflow (upstream_rq_active_overflow: the share's circuit
	// breaker full, a 503).
	ShareCluster map[string]int64 `json:"share_cluster_counters,omitempty"`
}

// shareCluster is the Envoy cluster of the harness's share route.
var shareCluster = envoy.Route{Name: routeName}.SharesCluster()

// bench is the metrics' label of the harness's bulkhead.
var bench = map[string]string{"dependency": routeName}

// sharesFigures are a shares phase's figures between two readings; nil
// unless both have the daemon's metrics.
func sharesFigures(limit int, p *Phase, before, after reading) *SharesFigures {
	if before.metrics == nil || after.metrics == nil {
		return nil
	}
	m0, m1 := before.metrics, after.metrics
	val := func(m *testbed.Metrics, name string, labels map[string]string) float64 { return m.Sum(name, labels) }
	delta := func(name string, labels map[string]string) float64 {
		return val(m1, name, labels) - val(m0, name, labels)
	}
	s := &SharesFigures{Limit: limit,
		Mode: val(m1, "bulkhead_shares_mode", bench), Share: val(m1, "bulkhead_shares_limit", bench),
		InFlight: val(m1, "bulkhead_shares_in_flight", bench), Permits: val(m1, "bulkhead_shares_permits", bench),
		ToStrict: int64(math.Round(delta("bulkhead_shares_switches_total", map[string]string{"dependency": routeName, "to": "strict"}))),
		ToShares: int64(math.Round(delta("bulkhead_shares_switches_total", map[string]string{"dependency": routeName, "to": "shares"}))),
	}
	if p.Requests > 0 {
		checks := delta("bulkhead_admitted_total", bench) + delta("bulkhead_rejected_total", bench)
		s.ChecksPerRequest = round3(checks / float64(p.Requests))
		if before.stats != nil && after.stats != nil {
			c := "cluster." + shareCluster + "."
			s.ShareRoute = round3((float64(after.stats[c+"upstream_rq_total"]) - float64(before.stats[c+"upstream_rq_total"])) / float64(p.Requests))
			for name, v := range after.stats {
				d := int64(v) - int64(before.stats[name])
				if !strings.HasPrefix(name, c) || d == 0 {
					continue
				}
				if s.ShareCluster == nil {
					s.ShareCluster = map[string]int64{}
				}
				s.ShareCluster[name[len(c):]] = d
				if strings.HasSuffix(name, "_overflow") {
					s.Overflows += d
				}
			}
		}
	}
	s.Demand = demand(p)
	return s
}

// demand is a phase's requests in flight: the closed loop's (and the near
// phase's) connections, the open loop's rate times its mean latency
// (Little's law).
func demand(p *Phase) float64 {
	if p.Loop != "open" {
		return float64(p.Conns)
	}
	return math.Round(100*p.RPS*p.Latency.MeanMs/1000) / 100
}

// shareHandedOut waits until st's daemon runs its bulkhead on shares and
// has handed st's Envoy one.
func shareHandedOut(ctx context.Context, st *stack) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		m, err := testbed.Scrape(ctx, st.metricsURL())
		if err != nil {
			return fmt.Errorf("smoke test of %s: %w", st.spec.Name, err)
		}
		mode, _ := m.Value("bulkhead_shares_mode", bench)
		envoys, _ := m.Value("bulkhead_shares_envoys", bench)
		share, _ := m.Value("bulkhead_shares_limit", bench)
		if mode == 1 && envoys >= 1 && share > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("smoke test of %s: no share handed out (mode %v, %v Envoys, share %v): %w", st.spec.Name, mode, envoys, share, ctx.Err())
		case <-time.After(100 * time.Millisecond): // polling, with a deadline
		}
	}
}
