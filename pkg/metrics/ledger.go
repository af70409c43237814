package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
)

// LedgerMetrics records the series of the permit ledger's backend: which one
// serves, and for the Redis one its availability and its calls. Safe for
// concurrent use.
type LedgerMetrics struct {
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	calls       *prometheus.CounterVec
	seconds     *prometheus.HistogramVec
	replicas    prometheus.Gauge
	failOpen    *prometheus.CounterVec
}

// Redis calls take well under a millisecond on a LAN; the buckets resolve
// 100 µs and show a slow or remote Redis plainly.
var callBuckets = []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1}

// NewLedgerMetrics registers the ledger's series on reg and says that backend
// ("memory" or "redis") serves; with the memory backend the other series
// stay at zero (strict).
func NewLedgerMetrics(reg prometheus.Registerer, backend string) (*LedgerMetrics, error) {
	l := &LedgerMetrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bulkhead_ledger_state",
			Help: "1 for the shared ledger's current state at this replica: strict (Redis decides), unavailable (ledger.on_unavailable applies beyond the capacity lease held).",
		}, []string{"state"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_ledger_transitions_total", Help: "Changes of the shared ledger's state at this replica, by the state entered.",
		}, []string{"to"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_ledger_calls_total", Help: "Calls to Redis (one script each, or one pipeline of state scripts), by operation and result: ok, error, timeout, deadline (the caller's deadline, a Check's, came before ledger.redis.timeout: no sign of Redis).",
		}, []string{"op", "result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "bulkhead_ledger_call_seconds", Help: "Time of one call to Redis, by operation.", Buckets: callBuckets,
		}, []string{"op"}),
		replicas: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulkhead_ledger_replicas", Help: "Live replicas sharing the ledger, as Redis last reported.",
		}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkhead_ledger_fail_open_total", Help: "Checks admitted without a permit because Redis did not answer (ledger.on_unavailable: fail_open).",
		}, []string{"dependency"}),
	}
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "bulkhead_ledger_info", Help: "1, labelled with the permit ledger's backend: memory or redis.",
	}, []string{"backend"})
	for _, c := range []prometheus.Collector{l.state, l.transitions, l.calls, l.seconds, l.replicas, l.failOpen, info} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	info.WithLabelValues(backend).Set(1)
	for _, s := range admission.States() {
		l.transitions.WithLabelValues(s.String())
	}
	for _, op := range admission.Ops() {
		for _, r := range []string{"ok", "error", "timeout", "deadline"} {
			l.calls.WithLabelValues(string(op), r)
		}
		l.seconds.WithLabelValues(string(op))
	}
	l.setState(admission.Strict)
	if backend == "redis" {
		l.setState(admission.Unavailable) // until Redis first answers
	}
	l.replicas.Set(1)
	return l, nil
}

func (l *LedgerMetrics) setState(s admission.State) {
	for _, o := range admission.States() {
		v := 0.0
		if o == s {
			v = 1
		}
		l.state.WithLabelValues(o.String()).Set(v)
	}
}

// LedgerCall counts and times one call to Redis.
func (l *LedgerMetrics) LedgerCall(op admission.Op, d time.Duration, err error) {
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, admission.ErrCallerDeadline):
		result = "deadline" // the Check's timeout, not Redis's
	case isTimeout(err):
		result = "timeout"
	default:
		result = "error"
	}
	l.calls.WithLabelValues(string(op), result).Inc()
	if d > 0 {
		l.seconds.WithLabelValues(string(op)).Observe(d.Seconds())
	}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout()
}

// LedgerState records a change of state.
func (l *LedgerMetrics) LedgerState(s admission.State) {
	l.setState(s)
	l.transitions.WithLabelValues(s.String()).Inc()
}

// LedgerReplicas records the live replicas.
func (l *LedgerMetrics) LedgerReplicas(n int) { l.replicas.Set(float64(n)) }

// FailOpen counts a Check admitted without a permit.
func (l *LedgerMetrics) FailOpen(dependency string) { l.failOpen.WithLabelValues(dependency).Inc() }
