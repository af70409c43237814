package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// inputs count what the Check path found wrong with, distrusted or ignored
// in a request. Labels are configured bulkhead names and fixed sets only.
type inputs struct {
	invalidPriority *counters // by dependency
	invalidLeaseTTL *counters // by dependency
	untrusted       *counters // by dependency
	invalid         *counters // by bulkhead.Input
	unmatched       *counters // by bulkhead.UnmatchedOutcome
}

func newInputs() inputs {
	in := inputs{
		invalidPriority: newCounters(prometheus.CounterOpts{
			Name: "bulkhead_invalid_priority_total", Help: "Checks whose priority value was not a known class (the default class was used).",
		}, "dependency"),
		invalidLeaseTTL: newCounters(prometheus.CounterOpts{
			Name: "bulkhead_invalid_lease_ttl_total", Help: "Route lease_ttl values (context_extensions) that were not a positive duration (ignored) or above leases.max_route_ttl (cut to it).",
		}, "dependency"),
		untrusted: newCounters(prometheus.CounterOpts{
			Name: "bulkhead_untrusted_priority_total",
			Help: "Priority headers that would have raised a request's class from a source outside authz.trusted_priority_sources (the route's class was used).",
		}, "dependency"),
		invalid: newCounters(prometheus.CounterOpts{
			Name: "bulkhead_invalid_inputs_total",
			Help: "Check inputs ignored: tenant header values over the length bound (no tenant), x-bulkhead-node metadata that is not a valid node id.",
		}, "input"),
		unmatched: newCounters(prometheus.CounterOpts{
			Name: "bulkhead_unmatched_checks_total", Help: "Checks with no or an unknown bulkhead key, by the policy's outcome.",
		}, "outcome"),
	}
	for _, i := range bulkhead.Inputs() {
		in.invalid.with(string(i))
	}
	return in
}

func (in *inputs) collectors() []prometheus.Collector {
	return []prometheus.Collector{in.invalidPriority.vec, in.invalidLeaseTTL.vec, in.untrusted.vec, in.invalid.vec, in.unmatched.vec}
}

// InvalidPriority counts a check whose priority value was not a class.
func (m *Metrics) InvalidPriority(dependency string) { m.inputs.invalidPriority.with(dependency).Inc() }

// InvalidLeaseTTL counts a route lease_ttl that was ignored or cut.
func (m *Metrics) InvalidLeaseTTL(dependency string) { m.inputs.invalidLeaseTTL.with(dependency).Inc() }

// UntrustedPriority implements bulkhead.InputRecorder.
func (m *Metrics) UntrustedPriority(dependency string) { m.inputs.untrusted.with(dependency).Inc() }

// InvalidInput implements bulkhead.InputRecorder.
func (m *Metrics) InvalidInput(input bulkhead.Input) { m.inputs.invalid.with(string(input)).Inc() }

// Unmatched counts a check with no or an unknown bulkhead key, by outcome.
// Denied ones also count as rejected with reason unknown_bulkhead under
// dependency "_unknown".
func (m *Metrics) Unmatched(outcome bulkhead.UnmatchedOutcome) {
	m.inputs.unmatched.with(string(outcome)).Inc()
	if outcome == bulkhead.UnmatchedDenied {
		m.unknownRejected.Add(1)
	}
}
