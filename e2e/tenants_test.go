//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// Issue 4: two tenants on one bulkhead, one flooding: the quiet tenant
// keeps its p99 and gets no rejections.
func TestTenantIsolation(t *testing.T) {
	s := startStack(t, `
authz: {tenant_header: x-tenant}
bulkheads:
  catalog:
    max_concurrent: 12
    max_queue: 10
    max_wait: 300ms
    tenant: {max_concurrent: 6, max_queue: 4, max_wait: 200ms}
`, nil)
	// Each tenant's compartment is half the bulkhead, so the quiet tenant
	// keeps 6 permits whatever the noisy one does: 25 req/s fit in them up
	// to 240 ms per request, headroom for a starved shared machine (a CI run
	// saw a 438 ms baseline p99 for the 50 ms upstream with 4).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.up["catalog"].SetDelay(50 * time.Millisecond)

	load := func(tenant string, rate float64, d time.Duration) *testbed.Load {
		l, err := testbed.NewLoad(testbed.LoadSpec{
			URL: s.base + "/catalog", Header: http.Header{"X-Tenant": {tenant}},
			Rate: rate, Duration: d, MaxRequests: int(rate*d.Seconds()) + 1, MaxOutstanding: 300,
		})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	warm := load("quiet", 20, time.Second)
	if _, err := warm.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// 200 samples each: p99 is the third-largest latency, not one hiccup.
	base, err := load("quiet", 25, 8*time.Second).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}

	noisyLoad := load("noisy", 200, 8*time.Second) // wants ~10 permits at 50 ms; its compartment is 6
	noisyDone := make(chan testbed.Stats, 1)
	go func() {
		st, _ := noisyLoad.Run(ctx)
		noisyDone <- st
	}()
	quiet, err := load("quiet", 25, 8*time.Second).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	noisy := <-noisyDone

	t.Logf("quiet: baseline p99 %v, with noisy neighbour p99 %v (%d requests, %d ok)", base.P99(), quiet.P99(), quiet.Sent, quiet.OK())
	t.Logf("noisy: %d sent, %d ok, rejected %v", noisy.Sent, noisy.OK(), noisy.ByReason)
	if quiet.OK() != quiet.Sent || quiet.Rejections != 0 || quiet.Errors() != 0 {
		t.Errorf("quiet tenant: %d sent, %d ok, %d rejected, %d errors", quiet.Sent, quiet.OK(), quiet.Rejections, quiet.Errors())
	}
	if quiet.P99() > base.P99()*3/2 {
		t.Errorf("quiet tenant p99 %v exceeds 1.5x its baseline %v", quiet.P99(), base.P99())
	}
	if noisy.Rejections == 0 || !noisy.RejectionsWellFormed() {
		t.Errorf("noisy tenant was never limited (%d rejections)", noisy.Rejections)
	}
	m := s.metrics()
	if got := m.Sum("bulkhead_tenant_rejected_total", map[string]string{"dependency": "catalog"}); got == 0 {
		t.Error("no tenant-level rejections counted")
	}
	if got, _ := m.Value("bulkhead_tenants", map[string]string{"dependency": "catalog"}); got != 2 {
		t.Errorf("bulkhead_tenants = %v, want 2", got)
	}
	for _, sm := range m.Samples("bulkhead_rejected_total") {
		if _, ok := sm.Labels["tenant"]; ok {
			t.Fatal("a tenant became a metric label")
		}
	}
}
