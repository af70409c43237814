package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// SharesSource lists, at scrape time, every bulkhead in shares.mode shares
// or auto: whether it runs strict now, the Envoys holding a share, the
// permits held for shares, the Σ max_requests last handed out, the
// requests the Envoys last reported in flight under them, and its switches
// to strict and back (EachShares, both classes together); and the same
// counts for each class's share cluster apart (EachSharesClass: normal and
// critical, each once per bulkhead). *shares.Manager is one.
type SharesSource interface {
	EachShares(each func(dependency string, strict bool, envoys, held, limit, inFlight int, toStrict, toShares uint64))
	EachSharesClass(each func(dependency string, priority bulkhead.Priority, envoys, held, limit, inFlight int))
	// EachSharesRequests gives, per bulkhead, the requests its Envoys'
	// circuit breakers admitted under their shares and those they turned
	// away (overflowed), as the Envoys' load reports count them, since the
	// start.
	EachSharesRequests(each func(dependency string, admitted, overflowed uint64))
}

// RegisterShares registers the shares series on reg: bulkhead_shares_mode,
// bulkhead_shares_envoys, bulkhead_shares_permits, bulkhead_shares_limit,
// bulkhead_shares_in_flight and bulkhead_shares_switches_total (both
// classes together, labelled by dependency only, so that the rules and
// dashboards that read them keep their meaning), and the class split of
// the four counts: bulkhead_shares_class_envoys, _permits, _limit and
// _in_flight, labelled by dependency and priority (normal, critical).
func RegisterShares(reg prometheus.Registerer, src SharesSource) error {
	return reg.Register(&sharesCollector{src: src})
}

var (
	descSharesMode = prometheus.NewDesc("bulkhead_shares_mode",
		"1 while the bulkhead hands its Envoys shares (no ext_authz hop), 0 while it runs strict permits.",
		[]string{"dependency"}, nil)
	descSharesEnvoys = prometheus.NewDesc("bulkhead_shares_envoys",
		"Envoys holding a share of the bulkhead.", []string{"dependency"}, nil)
	descSharesPermits = prometheus.NewDesc("bulkhead_shares_permits",
		"Permits of the bulkhead's limit held for its Envoys' shares (counted in use).", []string{"dependency"}, nil)
	descSharesLimit = prometheus.NewDesc("bulkhead_shares_limit",
		"Sum of the circuit-breaker thresholds (max_requests) the bulkhead's Envoys were last told.", []string{"dependency"}, nil)
	descSharesInFlight = prometheus.NewDesc("bulkhead_shares_in_flight",
		"Requests the bulkhead's Envoys last reported in flight under their shares (LRS).", []string{"dependency"}, nil)
	descSharesRequests = prometheus.NewDesc("bulkhead_shares_requests_total",
		"Requests the bulkhead's Envoys' circuit breakers admitted under their shares (result admitted) or turned away "+
			"(result overflowed: Envoy's 503, x-envoy-overloaded), as their load reports (LRS) count them.",
		[]string{"dependency", "result"}, nil)
	descSharesSwitches = prometheus.NewDesc("bulkhead_shares_switches_total",
		"Switches of a bulkhead in mode auto, to strict permits (near the limit) or back to shares.",
		[]string{"dependency", "to"}, nil)

	// The class split: priority normal is the share cluster <cluster>,
	// critical the critical share cluster <cluster>_critical. Summed over
	// priority, _permits, _limit and _in_flight equal the series above;
	// _envoys may exceed bulkhead_shares_envoys (an Envoy holding both
	// classes counts in each).
	descSharesClassEnvoys = prometheus.NewDesc("bulkhead_shares_class_envoys",
		"Envoys holding a share of the bulkhead of this class (priority).", []string{"dependency", "priority"}, nil)
	descSharesClassPermits = prometheus.NewDesc("bulkhead_shares_class_permits",
		"Permits of the bulkhead's limit held for its Envoys' shares of this class (priority).", []string{"dependency", "priority"}, nil)
	descSharesClassLimit = prometheus.NewDesc("bulkhead_shares_class_limit",
		"Sum of the circuit-breaker thresholds (max_requests) the bulkhead's Envoys were last told for this class's share cluster.",
		[]string{"dependency", "priority"}, nil)
	descSharesClassInFlight = prometheus.NewDesc("bulkhead_shares_class_in_flight",
		"Requests the bulkhead's Envoys last reported in flight under their shares of this class (LRS).", []string{"dependency", "priority"}, nil)
)

type sharesCollector struct{ src SharesSource }

func (c *sharesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSharesMode, descSharesEnvoys, descSharesPermits, descSharesLimit, descSharesInFlight, descSharesSwitches, descSharesRequests,
		descSharesClassEnvoys, descSharesClassPermits, descSharesClassLimit, descSharesClassInFlight} {
		ch <- d
	}
}

func (c *sharesCollector) Collect(ch chan<- prometheus.Metric) {
	c.src.EachShares(func(dep string, strict bool, envoys, held, limit, inFlight int, toStrict, toShares uint64) {
		mode := 1.0
		if strict {
			mode = 0
		}
		ch <- prometheus.MustNewConstMetric(descSharesMode, prometheus.GaugeValue, mode, dep)
		ch <- prometheus.MustNewConstMetric(descSharesEnvoys, prometheus.GaugeValue, float64(envoys), dep)
		ch <- prometheus.MustNewConstMetric(descSharesPermits, prometheus.GaugeValue, float64(held), dep)
		ch <- prometheus.MustNewConstMetric(descSharesLimit, prometheus.GaugeValue, float64(limit), dep)
		ch <- prometheus.MustNewConstMetric(descSharesInFlight, prometheus.GaugeValue, float64(inFlight), dep)
		ch <- prometheus.MustNewConstMetric(descSharesSwitches, prometheus.CounterValue, float64(toStrict), dep, "strict")
		ch <- prometheus.MustNewConstMetric(descSharesSwitches, prometheus.CounterValue, float64(toShares), dep, "shares")
	})
	c.src.EachSharesClass(func(dep string, p bulkhead.Priority, envoys, held, limit, inFlight int) {
		class := p.String()
		ch <- prometheus.MustNewConstMetric(descSharesClassEnvoys, prometheus.GaugeValue, float64(envoys), dep, class)
		ch <- prometheus.MustNewConstMetric(descSharesClassPermits, prometheus.GaugeValue, float64(held), dep, class)
		ch <- prometheus.MustNewConstMetric(descSharesClassLimit, prometheus.GaugeValue, float64(limit), dep, class)
		ch <- prometheus.MustNewConstMetric(descSharesClassInFlight, prometheus.GaugeValue, float64(inFlight), dep, class)
	})
	c.src.EachSharesRequests(func(dep string, admitted, overflowed uint64) {
		ch <- prometheus.MustNewConstMetric(descSharesRequests, prometheus.CounterValue, float64(admitted), dep, "admitted")
		ch <- prometheus.MustNewConstMetric(descSharesRequests, prometheus.CounterValue, float64(overflowed), dep, "overflowed")
	})
}
