package admin_test

import (
	"net/http/httptest"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
)

func TestJSONSetCircuit(t *testing.T) {
	f := newFixture(t, nil)
	f.fake.Mutate("catalog", func(st *admin.Status) { st.Circuit = &breaker.Snapshot{} })
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	c := ts.Client()
	for _, tt := range []struct {
		name, path, body string
		code             int
		want             map[string]any
	}{
		{"force open", "/v1/bulkheads/catalog:circuit", `{"mode": "force_open"}`, 200,
			map[string]any{"bulkhead.circuit.state": "open", "bulkhead.circuit.mode": "force_open"}},
		{"auto", "/v1/bulkheads/catalog:circuit", `{"mode": "auto"}`, 200,
			map[string]any{"bulkhead.circuit.state": "closed", "bulkhead.circuit.mode": "auto"}},
		{"unknown mode", "/v1/bulkheads/catalog:circuit", `{"mode": "open"}`, 400, map[string]any{"field": "mode"}},
		{"bad body", "/v1/bulkheads/catalog:circuit", `{"mode": 1}`, 400, map[string]any{"field": "body"}},
		{"no breaker", "/v1/bulkheads/auth:circuit", `{"mode": "force_open"}`, 409, nil},
		{"unknown bulkhead", "/v1/bulkheads/nope:circuit", `{"mode": "auto"}`, 404, nil},
	} {
		r := do(t, c, "POST", ts.URL+tt.path, tt.body, nil)
		if r.code != tt.code {
			t.Errorf("%s: %d %s, want %d", tt.name, r.code, r.raw, tt.code)
			continue
		}
		r.check(t, tt.name, tt.want)
	}
	if got := do(t, c, "GET", ts.URL+"/v1/bulkheads/auth", "", nil); got.body["bulkhead"].(map[string]any)["circuit"] != nil {
		t.Errorf("a bulkhead without a breaker shows a circuit: %s", got.raw)
	}
}
