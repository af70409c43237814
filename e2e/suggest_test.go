//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// TestSuggest drives catalog at a known rate and latency and asks for a
// recommendation: Little's law (50/s x 100 ms = 5 permits) within the
// headroom, through the JSON API and bulkheadctl alike; orders, without
// traffic, gets none.
func TestSuggest(t *testing.T) {
	s := startStack(t, `
bulkheads:
  catalog: {max_concurrent: 50, max_queue: 10, max_wait: 200ms}
  orders: {max_concurrent: 5}
`, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.up["catalog"].SetDelay(100 * time.Millisecond)
	const rate, d = 50.0, 5 * time.Second
	st := s.runLoads(ctx, rate, d, "/catalog")["/catalog"]
	if st.OK() < 240 {
		t.Fatalf("load: %d of %d answered 200", st.OK(), st.Sent)
	}
	s.waitGauge("bulkhead_active_calls", "catalog", 0, 5*time.Second)

	sugs := suggestions(t, ctx, s.adminAddr)
	if len(sugs) != 2 {
		t.Fatalf("suggest: %+v", sugs)
	}
	cat, ord := sugs[0], sugs[1]
	t.Logf("catalog: %+v", cat)
	if ord.Name != "orders" || !strings.Contains(ord.Refused, "too little traffic") {
		t.Errorf("orders without traffic: %+v", ord)
	}
	// Little: 50/s x (100 ms upstream + Envoy and the access log) ~ 5.
	const little = rate * 0.1
	if cat.Refused != "" || math.Abs(cat.Throughput-rate) > 0.1*rate || cat.Little < little || cat.Little > 1.3*little {
		t.Fatalf("catalog evidence: %+v; want throughput ~%v, Little ~%v", cat, rate, little)
	}
	// The limit: Little's figure plus 25%, unless the traffic held more
	// permits than that 1% of the time.
	want := int(math.Ceil(math.Max(cat.Little*1.25, float64(cat.P99InUse))))
	if cat.MaxConcurrent != want || cat.MaxConcurrent < int(math.Ceil(little*1.25)) || cat.MaxConcurrent > 3*int(little) {
		t.Errorf("catalog max_concurrent %d, want %d (Little %.1f, p99 in use %d, headroom 25%%)", cat.MaxConcurrent, want, cat.Little, cat.P99InUse)
	}

	out, err := exec.CommandContext(ctx, bulkheadctlBin, "--addr", s.adminAddr, "suggest", "catalog", "--window", "30s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "catalog") {
		t.Fatalf("bulkheadctl suggest: %v\n%s", err, out)
	}
	t.Logf("bulkheadctl suggest catalog:\n%s", out)
}

// suggestion is one bulkhead's entry of the admin API's suggestions.
type suggestion struct {
	Name          string  `json:"name"`
	Refused       string  `json:"refused"`
	Requests      uint64  `json:"requests"`
	Throughput    float64 `json:"throughput"`
	MeanHold      string  `json:"mean_hold"`
	Little        float64 `json:"little"`
	Peak          int     `json:"peak"`
	P99InUse      int     `json:"p99_in_use"`
	MaxConcurrent int     `json:"max_concurrent"`
	MaxQueue      int     `json:"max_queue"`
}

// suggestions asks the daemon at admin for every bulkhead's suggestion
// over the last 30 s (at least 100 requests, 25% headroom).
func suggestions(t *testing.T, ctx context.Context, admin string) []suggestion {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		"http://"+admin+"/v1/bulkheads:suggest?window=30s&min_requests=100&headroom=0.25", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Suggestions []suggestion `json:"suggestions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("suggest: %v", err)
	}
	return body.Suggestions
}

// TestSuggestSharedLedger: two replicas on the Redis ledger, each behind
// an Envoy of its own, each hearing half of catalog's traffic (25/s
// through each Envoy, 100 ms upstream): a suggestion asked of either
// counts the whole mesh's 50/s (Little ~5), not its own half; and with
// the permits in use counted across the mesh.
func TestSuggestSharedLedger(t *testing.T) {
	srv := testkit.StartRedis(t)
	rs := startReplicaStack(t, replicaSpec{
		ledger: redisLedger(srv.Addr), replicas: 2, envoys: 1, rdb: newRedisClient(t, srv.Addr),
		yaml:  "bulkheads:\n  catalog: {max_concurrent: 50, max_queue: 10, max_wait: 200ms}\n",
		envoy: func(p *envoy.Params) { p.BulkheadReplicas = nil }, // Envoy 0 asks replica 0 only
	})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	rs.point(1)
	bases := []string{rs.bases[0], rs.startSecondEnvoy(ctx, "edge-2")} // Envoy 1 asks replica 1 only
	rs.up["catalog"].SetDelay(100 * time.Millisecond)
	const rate, d = 25.0, 5 * time.Second
	var waits []func() testbed.Stats
	for _, b := range bases {
		_, wait := runLoad(t, ctx, testbed.LoadSpec{URL: b + "/catalog", Rate: rate, Duration: d,
			MaxRequests: int(rate * d.Seconds()), MaxOutstanding: 50, Timeout: 5 * time.Second})
		waits = append(waits, wait)
	}
	for i, wait := range waits {
		if st := wait(); st.OK() < 120 {
			t.Fatalf("load through Envoy %d: %d of %d answered 200", i, st.OK(), st.Sent)
		}
	}
	rs.point(0)
	rs.waitGauge("bulkhead_active_calls", "catalog", 0, 5*time.Second)
	const little = 2 * rate * 0.1
	for i := range 2 {
		rs.point(i)
		poll(t, ctx, fmt.Sprintf("replica %d counting both replicas' requests", i), func() bool {
			sugs := suggestions(t, ctx, rs.adminAddr)
			return len(sugs) == 1 && sugs[0].Requests >= 240
		})
		cat := suggestions(t, ctx, rs.adminAddr)[0]
		t.Logf("replica %d: %+v", i, cat)
		if cat.Refused != "" || math.Abs(cat.Throughput-2*rate) > 0.1*2*rate || cat.Little < little || cat.Little > 1.3*little {
			t.Errorf("replica %d: %+v; want the mesh's throughput ~%v and Little ~%v, not its own half", i, cat, 2*rate, little)
		}
		if cat.Peak < 2 {
			t.Errorf("replica %d: peak in use %d, want the mesh's (~%v)", i, cat.Peak, little)
		}
	}
}
