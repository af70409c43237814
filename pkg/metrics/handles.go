package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// counters resolves the series of a one-label counter vector once per label
// value, so that recording is a lock-free map load and an atomic add rather
// than WithLabelValues (label validation, hashing and the vector's lock) on
// every request. The map holds what the vector holds: label values are
// configured bulkhead names or closed sets, so both stay bounded.
type counters struct {
	vec     *prometheus.CounterVec
	handles sync.Map // label value -> prometheus.Counter
}

func newCounters(opts prometheus.CounterOpts, label string) *counters {
	return &counters{vec: prometheus.NewCounterVec(opts, []string{label})}
}

// with returns the series of value, creating it at zero the first time.
func (c *counters) with(value string) prometheus.Counter {
	if h, ok := c.handles.Load(value); ok {
		return h.(prometheus.Counter)
	}
	h, _ := c.handles.LoadOrStore(value, c.vec.WithLabelValues(value))
	return h.(prometheus.Counter)
}
