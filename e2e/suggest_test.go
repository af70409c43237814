//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
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

	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		"http://"+s.adminAddr+"/v1/bulkheads:suggest?window=30s&min_requests=100&headroom=0.25", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Suggestions []struct {
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
		} `json:"suggestions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Suggestions) != 2 {
		t.Fatalf("suggest: %v %+v", err, body)
	}
	cat, ord := body.Suggestions[0], body.Suggestions[1]
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
