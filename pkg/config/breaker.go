package config

import (
	"maps"
	"slices"

	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
)

// breakerFields are the fields of a bulkhead's circuit_breaker, in the order
// documented.
var breakerFields = []string{"failure_ratio", "min_requests", "window", "open_for", "half_open_probes", "slow_call_duration"}

// breaker decodes and checks a bulkhead's circuit_breaker mapping at path;
// a field left out gets breaker's default (slow_call_duration: off). It
// returns nil if raw is not a mapping.
func (d *decoder) breaker(path string, raw any) *breaker.Settings {
	m, ok := d.mapping(path, raw)
	if !ok {
		return nil
	}
	s := &breaker.Settings{FailureRatio: breaker.DefaultFailureRatio, MinRequests: breaker.DefaultMinRequests,
		Window: breaker.DefaultWindow, OpenFor: breaker.DefaultOpenFor, HalfOpenProbes: breaker.DefaultHalfOpenProbes}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		key, v := path+"."+k, m[k]
		switch {
		case v == nil:
		case k == "failure_ratio":
			s.FailureRatio = d.float(key, v)
		case k == "min_requests":
			s.MinRequests = d.integer(key, v)
		case k == "window":
			s.Window = d.duration(key, v)
		case k == "open_for":
			s.OpenFor = d.duration(key, v)
		case k == "half_open_probes":
			s.HalfOpenProbes = d.integer(key, v)
		case k == "slow_call_duration":
			s.SlowCallDuration = d.duration(key, v)
		default:
			d.ps.add(key, unknownField(k, breakerFields), "")
		}
	}
	d.fieldProblems(path, s.Validate(), func(string) bool { return false })
	return s
}
