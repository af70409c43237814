package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzPatchJSON sends arbitrary bodies to PATCH: the server never panics,
// answers 200 or a clean JSON error (400 naming the problem, 404, 413),
// and a refused patch changes nothing.
func FuzzPatchJSON(f *testing.F) {
	for _, seed := range []string{
		`{"max_concurrent": 4}`, `{"max_wait": "1s", "max_queue": 0}`, `{"reserve_critical": 0.3, "reserve_normal": 0.3}`,
		`{"max_concurrent": -1}`, `{"max_concurrent": 1e40}`, `{"max_wait": 5}`, `{"x": 1}`, `{}`, `null`, `[]`, ``, `{`,
		`{"max_queue": 1} trailing`, `"string"`, `{"max_concurrent": 2, "max_concurrent": 3}`, "\xff\xfe",
	} {
		f.Add("catalog", seed)
	}
	f.Fuzz(func(t *testing.T, name, body string) {
		fx := newFixture(t, nil)
		before := fx.fake.List()
		req := httptest.NewRequest("PATCH", "/v1/bulkheads/x", strings.NewReader(body))
		req.URL.Path = "/v1/bulkheads/" + name
		req.RemoteAddr = "127.0.0.1:1234"
		rec := httptest.NewRecorder()
		fx.srv.Handler().ServeHTTP(rec, req)
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("status %d: body is not JSON: %v: %q", rec.Code, err, rec.Body)
		}
		switch rec.Code {
		case http.StatusOK:
			return
		case http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge, http.StatusMethodNotAllowed:
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if msg, _ := out["error"].(string); msg == "" {
			t.Fatalf("status %d without an error message: %s", rec.Code, rec.Body)
		}
		if len(fx.fake.Calls()) != 0 {
			t.Fatalf("a refused patch reached the controller: %q", fx.fake.Calls())
		}
		after := fx.fake.List()
		for i := range before {
			if before[i].Snapshot.Settings != after[i].Snapshot.Settings {
				t.Fatalf("a refused patch changed %s", before[i].Snapshot.Name)
			}
		}
	})
}

// FuzzHoldersQuery sends arbitrary names and limits to GET .../holders:
// the server never panics, answers 200 with at most the bound of holders,
// or a clean JSON error.
func FuzzHoldersQuery(f *testing.F) {
	for _, seed := range []string{"", "0", "1", "1000", "1001", "-1", "many", "1e3", "0x10", "99999999999999999999", " 5"} {
		f.Add("catalog", seed)
	}
	f.Add("nope", "1")
	f.Fuzz(func(t *testing.T, name, limit string) {
		h := newHoldersFixture(t, nil)
		req := httptest.NewRequest("GET", "/v1/bulkheads/x/holders", nil)
		req.URL.Path = "/v1/bulkheads/" + name + "/holders"
		req.URL.RawQuery = url.Values{"limit": {limit}}.Encode()
		req.RemoteAddr = "127.0.0.1:1234"
		rec := httptest.NewRecorder()
		h.srv.Handler().ServeHTTP(rec, req)
		var out struct {
			Error   string `json:"error"`
			Holders []any  `json:"holders"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("status %d: body is not JSON: %v: %q", rec.Code, err, rec.Body)
		}
		switch rec.Code {
		case http.StatusOK:
			if len(out.Holders) > 1000 {
				t.Fatalf("%d holders", len(out.Holders))
			}
			return
		case http.StatusBadRequest, http.StatusNotFound:
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if out.Error == "" {
			t.Fatalf("status %d without an error message: %s", rec.Code, rec.Body)
		}
	})
}
