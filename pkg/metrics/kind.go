package metrics

import "github.com/prometheus/client_golang/prometheus"

var descKind = prometheus.NewDesc("bulkhead_kind",
	"Always 1: what the bulkhead counts (kind requests or connections); join on dependency to tell request and connection bulkheads apart.",
	[]string{"dependency", "kind"}, nil)

// SetKinds sets what each configured bulkhead counts (the configuration's
// kinds: requests or connections), reported as bulkhead_kind. A bulkhead
// missing from kinds has no bulkhead_kind series.
func (m *Metrics) SetKinds(kinds map[string]string) {
	m.kinds.Store(&kinds)
}

// kindOf is the kind SetKinds gave name, or "".
func (m *Metrics) kindOf(name string) string {
	if k := m.kinds.Load(); k != nil {
		return (*k)[name]
	}
	return ""
}
