package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
)

// BreakerSource gives the circuit breakers' state at scrape time;
// *breaker.Set is one.
type BreakerSource interface {
	States() []breaker.Named
}

// RegisterBreakers registers the circuit breakers' series on reg:
// bulkhead_circuit_state (0 closed, 1 open, 2 half-open),
// bulkhead_circuit_forced (1 force_open, -1 force_closed, 0 auto) and
// bulkhead_circuit_transitions_total{to}, for each bulkhead with a breaker.
func RegisterBreakers(reg prometheus.Registerer, src BreakerSource) error {
	return reg.Register(&breakerCollector{src: src})
}

var (
	descCircuitState = prometheus.NewDesc("bulkhead_circuit_state",
		"The bulkhead's circuit breaker: 0 closed, 1 open, 2 half-open.", []string{"dependency"}, nil)
	descCircuitForced = prometheus.NewDesc("bulkhead_circuit_forced",
		"An operator override of the circuit breaker: 1 force_open, -1 force_closed, 0 none (auto).", []string{"dependency"}, nil)
	descCircuitTransitions = prometheus.NewDesc("bulkhead_circuit_transitions_total",
		"Circuit breaker state changes, by the state entered.", []string{"dependency", "to"}, nil)
)

type breakerCollector struct{ src BreakerSource }

func (c *breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCircuitState
	ch <- descCircuitForced
	ch <- descCircuitTransitions
}

func (c *breakerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.src.States() {
		ch <- prometheus.MustNewConstMetric(descCircuitState, prometheus.GaugeValue, float64(b.State), b.Name)
		forced := 0.0
		switch b.Mode {
		case breaker.ForceOpen:
			forced = 1
		case breaker.ForceClosed:
			forced = -1
		}
		ch <- prometheus.MustNewConstMetric(descCircuitForced, prometheus.GaugeValue, forced, b.Name)
		for _, s := range breaker.States() {
			ch <- prometheus.MustNewConstMetric(descCircuitTransitions, prometheus.CounterValue, float64(b.Transitions[s]), b.Name, s.String())
		}
	}
}
