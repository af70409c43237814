package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// tlsMetrics follow the loads of the gRPC listener's TLS files. They are
// registered only by a daemon that serves TLS (RegisterTLS).
type tlsMetrics struct {
	reloads  *prometheus.CounterVec
	notAfter prometheus.Gauge
}

func newTLSMetrics() tlsMetrics {
	return tlsMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_grpc_tls_reloads_total",
			Help: "Loads of the gRPC listener's TLS files (at start and after each change), by result; a failure keeps the previous certificate.",
		}, []string{"result"}),
		notAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulkhead_grpc_tls_not_after_timestamp_seconds",
			Help: "Expiry (Unix time) of the certificate the gRPC listener serves; absent without listen.grpc_tls.",
		}),
	}
}

// RegisterTLS adds the TLS series to reg, which must be the registry given
// to New; only a daemon serving TLS has them.
func (m *Metrics) RegisterTLS(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.tls.reloads, m.tls.notAfter} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	m.tls.reloads.WithLabelValues(resultSuccess)
	m.tls.reloads.WithLabelValues(resultFailure)
	return nil
}

// TLSReload counts a load of the TLS files; a failure keeps the previous
// certificate serving.
func (m *Metrics) TLSReload(ok bool) { m.tls.reloads.WithLabelValues(resultOf(ok)).Inc() }

// TLSNotAfter sets the expiry of the certificate now served.
func (m *Metrics) TLSNotAfter(t time.Time) { m.tls.notAfter.Set(float64(t.Unix())) }
