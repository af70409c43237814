package server

import (
	"crypto/x509"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
)

// extraMetrics are the series this package adds to the daemon's registry:
// what the Check path distrusted or ignored, and the gRPC listener's TLS
// reloads. Labels are configured bulkhead names and fixed sets only.
type extraMetrics struct {
	untrusted   *prometheus.CounterVec
	invalid     *prometheus.CounterVec
	tlsReloads  *prometheus.CounterVec
	tlsNotAfter prometheus.Gauge
}

var _ authz.InputRecorder = (*extraMetrics)(nil)

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
		tlsReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_grpc_tls_reloads_total",
			Help: "Loads of the gRPC listener's TLS files (at start and after each change), by result; a failure keeps the previous certificate.",
		}, []string{"result"}),
		tlsNotAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulkhead_grpc_tls_not_after_timestamp_seconds",
			Help: "Expiry (Unix time) of the certificate the gRPC listener serves; absent without listen.grpc_tls.",
		}),
	}
	for _, c := range []prometheus.Collector{m.untrusted, m.invalid, m.tlsReloads} {
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

// registerTLS adds the TLS series; only a daemon serving TLS has them.
func (m *extraMetrics) registerTLS(reg prometheus.Registerer) error {
	for _, r := range []string{"success", "failure"} {
		m.tlsReloads.WithLabelValues(r)
	}
	return reg.Register(m.tlsNotAfter)
}

// TLSReloaded implements tlsRecorder.
func (m *extraMetrics) TLSReloaded(ok bool, leaf *x509.Certificate) {
	if !ok {
		m.tlsReloads.WithLabelValues("failure").Inc()
		return
	}
	m.tlsReloads.WithLabelValues("success").Inc()
	m.tlsNotAfter.Set(float64(leaf.NotAfter.Unix()))
}
