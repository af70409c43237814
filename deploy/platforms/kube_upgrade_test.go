package platforms

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
)

// previousChart is the chart version before this one, as helm packaged it
// (charts/bulkhead at 11d64a9), and previousValues a user's values for it.
var (
	previousChart  = filepath.Join("testdata", "bulkhead-0.1.0.tgz")
	previousValues = filepath.Join("testdata", "values-0.1.0.yaml")
)

// A release of the previous chart version upgraded to this one with the
// user's values unchanged but a limit, on a real API server: no immutable
// field touched (Deployment selector, Service clusterIP, the strategy that
// became Recreate), every object read back as helm sent it, the stored
// ConfigMap carrying the new limit and passing `bulkhead --check-config`;
// then rolled back to the previous version, and uninstalled leaving
// nothing.
func TestChartUpgradeFromPreviousVersion(t *testing.T) {
	start := time.Now()
	k := startKube(t)
	bulkhead := buildBulkhead(t)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(k.disco))
	r := release{name: "bh", namespace: "bulkhead"}

	k.helmOK(t, "install", r.name, previousChart, "--namespace", r.namespace, "--create-namespace",
		"--values", previousValues, "--timeout", "1m")
	k.checkLimit(t, mapper, bulkhead, r, "catalog", 10)
	k.helmOK(t, "upgrade", r.name, chartDir(t), "--namespace", r.namespace, "--values", previousValues,
		"--set", "bulkheads.catalog.max_concurrent=25", "--timeout", "1m")
	k.checkLimit(t, mapper, bulkhead, r, "catalog", 25)
	k.helmOK(t, "rollback", r.name, "1", "--namespace", r.namespace, "--timeout", "1m")
	k.checkLimit(t, mapper, bulkhead, r, "catalog", 10)
	history := k.helmOK(t, "history", r.name, "--namespace", r.namespace)
	for _, want := range []string{"bulkhead-0.1.0", "bulkhead-0.2.0"} {
		if !strings.Contains(history, want) {
			t.Errorf("helm history has no %s:\n%s", want, history)
		}
	}
	k.helmOK(t, "uninstall", r.name, "--namespace", r.namespace, "--wait", "--timeout", "1m")
	if left := k.leftovers(t, []string{r.namespace}); len(left) > 0 {
		t.Errorf("helm uninstall left %d objects:\n  %s", len(left), strings.Join(left, "\n  "))
	}
	t.Logf("whole test: %v", time.Since(start).Round(time.Millisecond))
}
