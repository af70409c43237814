//go:build e2e

package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// TestSharesCriticalRoute: bulkhead orders in mode shares with a critical
// reserve of 5 of 20, a critical route and a normal route on one Envoy,
// each with its share route. Far from the limit both classes run under
// their shares (no Check of a critical request reaches the daemon); past
// the limit the normal load overflows its share, which never takes the
// critical reserve, while the critical load keeps running under its own;
// in mode auto the same load goes strict, and the critical requests with
// it, as critical. The upstream never sees more than the limit.
func TestSharesCriticalRoute(t *testing.T) {
	m := startSharesMeshWith(t, sharesOpts{mode: "shares", settings: ", reserve: {critical: 0.25}", critical: true}, "envoy-a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ceiling = sharesLimit - sharesLimit/4 // normal's: the limit less the critical reserve
	normalKey := shares.ShareKey(shares.DefaultCluster("orders"))
	criticalKey := shares.ShareKey(shares.CriticalCluster(shares.DefaultCluster("orders")))
	poll(t, ctx, "envoy-a holds a critical share and a normal one", func() bool {
		return m.runtimeInt("envoy-a", criticalKey) > 0 && m.runtimeInt("envoy-a", normalKey) > 0 &&
			m.runtimeInt("envoy-a", shares.CriticalStrictKey("orders")) == 0
	})
	// The class series split the two shares as the Envoy holds them: one
	// Envoy in each class, each class's limit what its runtime key says
	// (read once the two shares differ, so that a swap of the classes
	// shows), and the classes' permits adding up to bulkhead_shares_permits.
	poll(t, ctx, "bulkhead_shares_class_* split envoy-a's two shares", func() bool {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		defer scancel()
		ms, err := testbed.Scrape(sctx, "http://"+m.http+"/metrics")
		if err != nil {
			return false
		}
		class := func(name, priority string) float64 {
			return ms.Sum(name, map[string]string{"dependency": "orders", "priority": priority})
		}
		crit, normal := class("bulkhead_shares_class_permits", "critical"), class("bulkhead_shares_class_permits", "normal")
		critShare, normalShare := m.runtimeInt("envoy-a", criticalKey), m.runtimeInt("envoy-a", normalKey)
		return class("bulkhead_shares_class_envoys", "critical") == 1 && class("bulkhead_shares_class_envoys", "normal") == 1 &&
			critShare != normalShare && int(class("bulkhead_shares_class_limit", "critical")) == critShare &&
			int(class("bulkhead_shares_class_limit", "normal")) == normalShare &&
			crit > 0 && normal > 0 && crit+normal == ms.Sum("bulkhead_shares_permits", orders)
	})
	criticalChecks := func() float64 {
		return m.value("bulkhead_admitted_total", map[string]string{"dependency": "orders", "priority": "critical"})
	}
	checks := func() float64 {
		return m.value("bulkhead_admitted_total", orders) + m.value("bulkhead_rejected_total", orders)
	}
	// both loads critical and normal requests at once for d, and samples the
	// Envoy's two shares meanwhile (their peaks).
	both := func(critRate, normalRate float64, d time.Duration) (crit, normal testbed.Stats, critPeak, normalPeak int) {
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Go(func() { crit = m.loadPath(ctx, "/critical", critRate, d, "envoy-a") })
		wg.Go(func() { normal = m.loadPath(ctx, "/orders", normalRate, d, "envoy-a") })
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				critPeak = max(critPeak, m.runtimeInt("envoy-a", criticalKey))
				normalPeak = max(normalPeak, m.runtimeInt("envoy-a", normalKey))
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
		wg.Wait()
		close(stop)
		<-sampled
		return crit, normal, critPeak, normalPeak
	}

	// Far from the limit: 2 critical and 4 normal requests in flight.
	critBefore, before := criticalChecks(), checks()
	crit, normal, critPeak, normalPeak := both(20, 40, 2*time.Second)
	critChecks, all := criticalChecks()-critBefore, checks()-before
	t.Logf("far from the limit: critical %d requests, %d rejected, %v Checks (share peak %d); normal %d requests, %d rejected (share peak %d); %v Checks in all; upstream peak %d",
		crit.Responses(), crit.Count(503), critChecks, critPeak, normal.Responses(), normal.Count(503), normalPeak, all, m.up.Max())
	if critChecks > 0 || all > float64(crit.Responses()+normal.Responses())/100 {
		t.Errorf("far from the limit %v critical requests (%v of every class) took the ext_authz hop: their shares should have admitted them", critChecks, all)
	}
	if crit.Count(503)+normal.Count(503) > 0 {
		t.Errorf("far from the limit %d critical and %d normal requests were rejected", crit.Count(503), normal.Count(503))
	}
	m.checkCap("far from the limit")

	// Past the limit: 30 normal requests wanted in flight, 2 critical.
	critBefore = criticalChecks()
	crit, normal, critPeak, normalPeak = both(20, 300, 3*time.Second)
	critChecks = criticalChecks() - critBefore
	t.Logf("normal at 150%%: critical %d requests, %d rejected, %v Checks (share peak %d); normal %d requests, %d rejected (share peak %d, ceiling %d); upstream peak %d",
		crit.Responses(), crit.Count(503), critChecks, critPeak, normal.Responses(), normal.Count(503), normalPeak, ceiling, m.up.Max())
	if normal.Count(503) == 0 {
		t.Errorf("normal load at 150%% of the limit: none of %d requests rejected; the test did not reach the limit", normal.Responses())
	}
	if normalPeak > ceiling {
		t.Errorf("the normal share reached %d: into the critical reserve (normal's ceiling %d)", normalPeak, ceiling)
	}
	if crit.Count(503) > crit.Responses()/50 {
		t.Errorf("normal load at 150%% of the limit: %d of %d critical requests rejected (want under 2%%): the reserve was not theirs",
			crit.Count(503), crit.Responses())
	}
	m.checkCap("normal at 150%")

	// Mode auto: the same load switches the bulkhead to strict permits;
	// both shares drain, and the critical requests take the strict route
	// with their class (their Checks reach the daemon as critical), where
	// the reserve is theirs.
	m.setMode(ctx, "auto")
	critBefore = criticalChecks()
	crit, normal, _, _ = both(20, 300, 3*time.Second)
	critChecks = criticalChecks() - critBefore
	t.Logf("mode auto, normal at 150%%: critical %d requests, %d rejected, %v Checks as critical; normal %d requests, %d rejected; strict layer: critical %d, normal %d; upstream peak %d",
		crit.Responses(), crit.Count(503), critChecks, normal.Responses(), normal.Count(503),
		m.runtimeInt("envoy-a", shares.CriticalStrictKey("orders")), m.runtimeInt("envoy-a", shares.StrictKey("orders")), m.up.Max())
	if s := m.value("bulkhead_shares_switches_total", map[string]string{"dependency": "orders", "to": "strict"}); s < 1 {
		t.Fatal("mode auto at 150% of the limit: the bulkhead never switched to strict permits")
	}
	if critChecks < float64(crit.Responses())/2 {
		t.Errorf("strict at 150%% of the limit: only %v of %d critical requests were decided by the daemon as critical", critChecks, crit.Responses())
	}
	if crit.Count(503) > crit.Responses()/50 {
		t.Errorf("strict at 150%% of the limit: %d of %d critical requests rejected (want under 2%%)", crit.Count(503), crit.Responses())
	}
	m.checkCap("mode auto, normal at 150%")
}
