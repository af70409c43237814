package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// tlsMetrics follow the loads of each TLS listener's files
// (bulkhead_<listener>_tls_…). A listener's series exist only when it
// serves TLS (RegisterTLS).
type tlsMetrics struct {
	mu        sync.Mutex
	listeners map[string]*tlsSeries
}

// tlsSeries are one listener's TLS series.
type tlsSeries struct {
	success, failure prometheus.Counter
	notAfter         prometheus.Gauge
}

// RegisterTLS adds the series of listener's TLS ("grpc", "admin"),
// configured at setting, to reg, which must be the registry given to New.
// Call it before the listener's files are loaded.
func (m *Metrics) RegisterTLS(reg prometheus.Registerer, listener, setting string) error {
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bulkhead_" + listener + "_tls_reloads_total",
		Help: "Loads of the TLS files of " + setting + " (at start and after each change), by result; a failure keeps the previous certificate.",
	}, []string{"result"})
	notAfter := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bulkhead_" + listener + "_tls_not_after_timestamp_seconds",
		Help: "Expiry (Unix time) of the certificate the " + listener + " listener serves; absent without " + setting + ".",
	})
	for _, c := range []prometheus.Collector{reloads, notAfter} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	m.tls.mu.Lock()
	defer m.tls.mu.Unlock()
	if m.tls.listeners == nil {
		m.tls.listeners = map[string]*tlsSeries{}
	}
	m.tls.listeners[listener] = &tlsSeries{
		success:  reloads.WithLabelValues(resultSuccess),
		failure:  reloads.WithLabelValues(resultFailure),
		notAfter: notAfter,
	}
	return nil
}

// Reloaded counts a load of listener's TLS files (creds.Recorder); a
// failure keeps the previous certificate serving. A listener that was not
// registered is ignored.
func (m *Metrics) Reloaded(listener string, ok bool, notAfter time.Time) {
	m.tls.mu.Lock()
	s := m.tls.listeners[listener]
	m.tls.mu.Unlock()
	switch {
	case s == nil:
	case !ok:
		s.failure.Inc()
	default:
		s.success.Inc()
		s.notAfter.Set(float64(notAfter.Unix()))
	}
}
