package admin_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
)

func TestJSONSuggest(t *testing.T) {
	f := newFixture(t, nil)
	f.fake.Suggestions(admin.Sized{Name: "catalog", Suggestion: sizing.Suggestion{Window: time.Minute, Requests: 600,
		Throughput: 10, MeanHold: 100 * time.Millisecond, Little: 1, Peak: 2, P99: 2, Headroom: 0.25,
		Current: bulkhead.Settings{MaxConcurrent: 10}, MaxConcurrent: 3}})
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	c := ts.Client()
	r := do(t, c, "GET", ts.URL+"/v1/bulkheads:suggest?window=1m", "", nil)
	if r.code != 200 {
		t.Fatalf("%d %s", r.code, r.raw)
	}
	r.check(t, "suggest all", map[string]any{"suggestions": 1.0})
	r = do(t, c, "GET", ts.URL+"/v1/bulkheads/catalog/suggest?headroom=0.25&min_requests=10", "", nil)
	if r.code != 200 {
		t.Fatalf("%d %s", r.code, r.raw)
	}
	list := r.body["suggestions"].([]any)
	if s := list[0].(map[string]any); s["max_concurrent"] != 3.0 || s["mean_hold"] != "100ms" || s["current_max_concurrent"] != 10.0 {
		t.Fatalf("suggestion %v", s)
	}
	for _, bad := range []string{"window=1h", "window=x", "headroom=-1", "min_requests=0.5"} {
		if r := do(t, c, "GET", ts.URL+"/v1/bulkheads:suggest?"+bad, "", nil); r.code != 400 {
			t.Errorf("%s: %d %s, want 400", bad, r.code, r.raw)
		}
	}
	if r := do(t, c, "GET", ts.URL+"/v1/bulkheads/nope/suggest", "", nil); r.code != 404 {
		t.Errorf("unknown bulkhead: %d", r.code)
	}
}
