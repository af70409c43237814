package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
)

// twoClasses is one bulkhead in shares: a normal share and a critical one
// at one Envoy, a normal share at another.
type twoClasses struct{}

func (twoClasses) EachShares(each func(dependency string, strict bool, envoys, held, limit, inFlight int, toStrict, toShares uint64)) {
	each("orders", false, 2, 14, 14, 5, 1, 2)
}

func (twoClasses) EachSharesClass(each func(dependency string, priority bulkhead.Priority, envoys, held, limit, inFlight int)) {
	each("orders", bulkhead.Normal, 2, 10, 10, 4)
	each("orders", bulkhead.Critical, 1, 4, 4, 1)
}

func (twoClasses) EachSharesRequests(each func(dependency string, admitted, overflowed uint64)) {
	each("orders", 1000, 3)
}

// The shares series keep both classes together under their own names
// (what the rules and the dashboard read), and the class series split
// them by priority.
func TestSharesSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := metrics.RegisterShares(reg, twoClasses{}); err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP bulkhead_shares_permits Permits of the bulkhead's limit held for its Envoys' shares (counted in use).
# TYPE bulkhead_shares_permits gauge
bulkhead_shares_permits{dependency="orders"} 14
# HELP bulkhead_shares_in_flight Requests the bulkhead's Envoys last reported in flight under their shares (LRS).
# TYPE bulkhead_shares_in_flight gauge
bulkhead_shares_in_flight{dependency="orders"} 5
# HELP bulkhead_shares_envoys Envoys holding a share of the bulkhead.
# TYPE bulkhead_shares_envoys gauge
bulkhead_shares_envoys{dependency="orders"} 2
# HELP bulkhead_shares_class_envoys Envoys holding a share of the bulkhead of this class (priority).
# TYPE bulkhead_shares_class_envoys gauge
bulkhead_shares_class_envoys{dependency="orders",priority="critical"} 1
bulkhead_shares_class_envoys{dependency="orders",priority="normal"} 2
# HELP bulkhead_shares_class_permits Permits of the bulkhead's limit held for its Envoys' shares of this class (priority).
# TYPE bulkhead_shares_class_permits gauge
bulkhead_shares_class_permits{dependency="orders",priority="critical"} 4
bulkhead_shares_class_permits{dependency="orders",priority="normal"} 10
# HELP bulkhead_shares_class_limit Sum of the circuit-breaker thresholds (max_requests) the bulkhead's Envoys were last told for this class's share cluster.
# TYPE bulkhead_shares_class_limit gauge
bulkhead_shares_class_limit{dependency="orders",priority="critical"} 4
bulkhead_shares_class_limit{dependency="orders",priority="normal"} 10
# HELP bulkhead_shares_class_in_flight Requests the bulkhead's Envoys last reported in flight under their shares of this class (LRS).
# TYPE bulkhead_shares_class_in_flight gauge
bulkhead_shares_class_in_flight{dependency="orders",priority="critical"} 1
bulkhead_shares_class_in_flight{dependency="orders",priority="normal"} 4
# HELP bulkhead_shares_requests_total Requests the bulkhead's Envoys' circuit breakers admitted under their shares (result admitted) or turned away (result overflowed: Envoy's 503, x-envoy-overloaded), as their load reports (LRS) count them.
# TYPE bulkhead_shares_requests_total counter
bulkhead_shares_requests_total{dependency="orders",result="admitted"} 1000
bulkhead_shares_requests_total{dependency="orders",result="overflowed"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "bulkhead_shares_permits", "bulkhead_shares_in_flight",
		"bulkhead_shares_envoys", "bulkhead_shares_class_envoys", "bulkhead_shares_class_permits",
		"bulkhead_shares_class_limit", "bulkhead_shares_class_in_flight", "bulkhead_shares_requests_total"); err != nil {
		t.Error(err)
	}
}
