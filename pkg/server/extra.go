package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
)

// extraMetrics are the series this package adds to the daemon's registry:
// what the Check path distrusted or ignored, and the TLS reloads of the
// gRPC and admin listeners. Labels are configured bulkhead names and fixed
// sets only.
type extraMetrics struct {
	untrusted *prometheus.CounterVec
	invalid   *prometheus.CounterVec
	tls       map[string]*tlsSeries // by listener; written before any load
}

// tlsSeries are one listener's TLS series.
type tlsSeries struct {
	reloads  *prometheus.CounterVec
	notAfter prometheus.Gauge
}

var (
	_ authz.InputRecorder = (*extraMetrics)(nil)
	_ creds.Recorder      = (*extraMetrics)(nil)
)

func newExtraMetrics(reg prometheus.Registerer) (*extraMetrics, error) {
	m := &extraMetrics{
		untrusted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_untrusted_priority_total",
			Help: "Priority headers that would have raised a request's class from a source outside authz.trusted_priority_sources (the route's class was used).",
		}, []string{"dependency"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_invalid_inputs_total",
			Help: "Check inputs ignored: tenant header values over the length bound (no tenant), x-bulkhead-node metadata that is not a valid node id.",
		}, []string{"input"}),
		tls: make(map[string]*tlsSeries),
	}
	for _, c := range []prometheus.Collector{m.untrusted, m.invalid} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, in := range []string{authz.InputTenant, authz.InputNode} {
		m.invalid.WithLabelValues(in)
	}
	return m, nil
}

// UntrustedPriority implements authz.InputRecorder.
func (m *extraMetrics) UntrustedPriority(dependency string) {
	m.untrusted.WithLabelValues(dependency).Inc()
}

// InvalidInput implements authz.InputRecorder.
func (m *extraMetrics) InvalidInput(input string) { m.invalid.WithLabelValues(input).Inc() }

// registerTLS adds the series of listener's TLS (bulkhead_<listener>_tls_…),
// configured at setting; only a listener serving TLS has them. Call it
// before the listener's files are loaded.
func (m *extraMetrics) registerTLS(reg prometheus.Registerer, listener, setting string) error {
	s := &tlsSeries{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_" + listener + "_tls_reloads_total",
			Help: "Loads of the TLS files of " + setting + " (at start and after each change), by result; a failure keeps the previous certificate.",
		}, []string{"result"}),
		notAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulkhead_" + listener + "_tls_not_after_timestamp_seconds",
			Help: "Expiry (Unix time) of the certificate the " + listener + " listener serves; absent without " + setting + ".",
		}),
	}
	for _, r := range []string{"success", "failure"} {
		s.reloads.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{s.reloads, s.notAfter} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	m.tls[listener] = s
	return nil
}

// Reloaded implements creds.Recorder.
func (m *extraMetrics) Reloaded(listener string, ok bool, notAfter time.Time) {
	s := m.tls[listener]
	if s == nil {
		return
	}
	if !ok {
		s.reloads.WithLabelValues("failure").Inc()
		return
	}
	s.reloads.WithLabelValues("success").Inc()
	s.notAfter.Set(float64(notAfter.Unix()))
}
