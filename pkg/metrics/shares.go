package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// SharesSource lists, at scrape time, every bulkhead in shares.mode shares
// or auto: whether it runs strict now, the Envoys holding a share, the
// permits held for shares, the Σ max_requests last handed out, the
// requests the Envoys last reported in flight under them, and its switches
// to strict and back. *shares.Manager is one.
type SharesSource interface {
	EachShares(each func(dependency string, strict bool, envoys, held, limit, inFlight int, toStrict, toShares uint64))
}

// RegisterShares registers the shares series on reg: bulkhead_shares_mode,
// bulkhead_shares_envoys, bulkhead_shares_permits, bulkhead_shares_limit,
// bulkhead_shares_in_flight and bulkhead_shares_switches_total.
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
	descSharesSwitches = prometheus.NewDesc("bulkhead_shares_switches_total",
		"Switches of a bulkhead in mode auto, to strict permits (near the limit) or back to shares.",
		[]string{"dependency", "to"}, nil)
)

type sharesCollector struct{ src SharesSource }

func (c *sharesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSharesMode, descSharesEnvoys, descSharesPermits, descSharesLimit, descSharesInFlight, descSharesSwitches} {
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
}
