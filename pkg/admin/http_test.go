package admin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type apiResp struct {
	code int
	body map[string]any
	raw  string
}

func do(t *testing.T, c *http.Client, method, url, body string, hdr map[string]string) apiResp {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := apiResp{code: resp.StatusCode, raw: string(raw)}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: content-type %q, body %s", method, url, ct, raw)
	}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		t.Fatalf("%s %s: body is not a JSON object: %v: %s", method, url, err, raw)
	}
	return r
}

// check compares the body's values at dotted paths with want (a list
// compares by its length, as a float64).
func (r apiResp) check(t *testing.T, name string, want map[string]any) {
	t.Helper()
	for path, w := range want {
		got := at(r.body, strings.Split(path, ".")...)
		if l, ok := got.([]any); ok {
			got = float64(len(l))
		}
		if got != w {
			t.Errorf("%s: %s = %#v, want %#v (body %s)", name, path, got, w, r.raw)
		}
	}
}

// at walks a decoded JSON value by keys ("bulkhead", "settings", ...).
func at(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func TestJSONAPI(t *testing.T) {
	f := newFixture(t, nil)
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()

	tests := []struct {
		name, method, path, body string
		hdr                      map[string]string
		code                     int
		// want maps a key path ("a.b.c") to the value it must hold.
		want map[string]any
	}{
		{name: "list", method: "GET", path: "/v1/bulkheads", code: 200,
			want: map[string]any{"bulkheads": 2.0}},
		{name: "get", method: "GET", path: "/v1/bulkheads/catalog", code: 200,
			want: map[string]any{"bulkhead.name": "catalog", "bulkhead.settings.max_concurrent": 10.0,
				"bulkhead.settings.max_wait": "500ms", "bulkhead.settings.reserve_critical": 0.2,
				"bulkhead.file_settings.max_queue": 20.0, "bulkhead.override": nil, "bulkhead.lease_ttl": "1m0s"}},
		{name: "get unknown", method: "GET", path: "/v1/bulkheads/nope", code: 404,
			want: map[string]any{"error": `no such bulkhead: "nope"`}},
		{name: "patch", method: "PATCH", path: "/v1/bulkheads/catalog", body: `{"max_concurrent": 4, "max_wait": "250ms"}`,
			hdr: map[string]string{"Content-Type": "application/json"}, code: 200,
			want: map[string]any{"bulkhead.settings.max_concurrent": 4.0, "bulkhead.settings.max_wait": "250ms",
				"bulkhead.settings.max_queue": 20.0, "bulkhead.file_settings.max_concurrent": 10.0,
				"previous.settings.max_concurrent": 10.0, "bulkhead.override.settings.max_concurrent": 4.0}},
		{name: "patch invalid value", method: "PATCH", path: "/v1/bulkheads/catalog", body: `{"max_concurrent": 0}`, code: 400,
			want: map[string]any{"field": "max_concurrent", "error": "max_concurrent: must be at least 1, got 0"}},
		{name: "patch two invalid values", method: "PATCH", path: "/v1/bulkheads/auth", body: `{"max_queue": -1, "reserve_normal": 1.5}`, code: 400,
			want: map[string]any{"field": "max_queue", "violations": 2.0}},
		{name: "patch reserves leave nothing", method: "PATCH", path: "/v1/bulkheads/auth", body: `{"reserve_critical": 0.5}`, code: 400,
			want: map[string]any{"field": "reserve"}},
		{name: "patch unknown field", method: "PATCH", path: "/v1/bulkheads/catalog", body: `{"max_concurent": 4}`, code: 400,
			want: map[string]any{"field": "max_concurent"}},
		{name: "patch wrong type", method: "PATCH", path: "/v1/bulkheads/catalog", body: `{"max_queue": "4"}`, code: 400,
			want: map[string]any{"field": "max_queue", "error": "max_queue: want an integer, got JSON string"}},
		{name: "patch bad duration", method: "PATCH", path: "/v1/bulkheads/catalog", body: `{"max_wait": "soon"}`, code: 400,
			want: map[string]any{"field": "max_wait"}},
		{name: "patch huge int", method: "PATCH", path: "/v1/bulkheads/catalog", body: `{"max_concurrent": 4294967296}`, code: 400,
			want: map[string]any{"field": "max_concurrent"}},
		{name: "patch empty object", method: "PATCH", path: "/v1/bulkheads/catalog", body: `{}`, code: 400,
			want: map[string]any{"error": "nothing to change: set at least one of max_concurrent, max_queue, max_wait, reserve_critical, reserve_normal"}},
		{name: "patch empty body", method: "PATCH", path: "/v1/bulkheads/catalog", body: ``, code: 400},
		{name: "patch trailing data", method: "PATCH", path: "/v1/bulkheads/catalog", body: `{"max_queue": 1} {}`, code: 400},
		{name: "patch not an object", method: "PATCH", path: "/v1/bulkheads/catalog", body: `[1]`, code: 400},
		{name: "patch unknown bulkhead", method: "PATCH", path: "/v1/bulkheads/nope", body: `{"max_queue": 1}`, code: 404},
		{name: "patch wrong content type", method: "PATCH", path: "/v1/bulkheads/catalog", body: `max_queue=1`,
			hdr: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, code: 415},
		{name: "patch too large", method: "PATCH", path: "/v1/bulkheads/catalog",
			body: `{"max_wait": "` + strings.Repeat("1", 70<<10) + `s"}`, code: 413},
		{name: "reset", method: "POST", path: "/v1/bulkheads/catalog:reset", code: 200,
			want: map[string]any{"bulkhead.settings.max_concurrent": 10.0, "bulkhead.override": nil,
				"previous.settings.max_concurrent": 4.0}},
		{name: "reset by delete", method: "DELETE", path: "/v1/bulkheads/auth/override", code: 200,
			want: map[string]any{"bulkhead.override": nil}},
		{name: "reset unknown", method: "POST", path: "/v1/bulkheads/nope:reset", code: 404},
		{name: "wrong method", method: "DELETE", path: "/v1/bulkheads/catalog", code: 405},
		{name: "wrong method on list", method: "POST", path: "/v1/bulkheads", code: 405},
		{name: "unknown verb", method: "POST", path: "/v1/bulkheads/catalog:drain", code: 404},
		{name: "unknown path", method: "GET", path: "/v2/things", code: 404},
		{name: "watch bad interval", method: "GET", path: "/v1/bulkheads:watch?interval=5ms", code: 400,
			want: map[string]any{"field": "interval"}},
		{name: "watch unparsable interval", method: "GET", path: "/v1/bulkheads:watch?interval=often", code: 400,
			want: map[string]any{"field": "interval"}},
	}
	for _, tc := range tests { // in order: later cases see earlier changes
		r := do(t, ts.Client(), tc.method, ts.URL+tc.path, tc.body, tc.hdr)
		if r.code != tc.code {
			t.Errorf("%s: status %d, want %d: %s", tc.name, r.code, tc.code, r.raw)
			continue
		}
		if r.code >= 400 {
			if msg, _ := r.body["error"].(string); msg == "" {
				t.Errorf("%s: error body without a message: %s", tc.name, r.raw)
			}
		}
		r.check(t, tc.name, tc.want)
	}
	if got, want := strings.Join(f.fake.Calls(), "|"), "update catalog by local from 127.0.0.1:"; !strings.HasPrefix(got, want) {
		t.Errorf("calls %q, want prefix %q", got, want)
	}
	if n := len(f.fake.Calls()); n != 3 {
		t.Errorf("%d changes reached the controller, want 3 (one patch, two resets): %q", n, f.fake.Calls())
	}
}

func TestJSONAPIRefusalsLogged(t *testing.T) {
	f := newFixture(t, nil)
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	do(t, ts.Client(), "PATCH", ts.URL+"/v1/bulkheads/catalog", `{"max_queue": -1}`, nil)
	logs := f.logs.String()
	for _, want := range []string{"level=WARN", `msg="admin call refused"`, "remote=127.0.0.1:", "code=InvalidArgument", "max_queue"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}

func TestJSONAPIRemoteWithoutCredentials(t *testing.T) {
	f := newFixture(t, nil)
	req := httptest.NewRequest("GET", "/v1/bulkheads", nil) // RemoteAddr 192.0.2.1
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("status %d, want 403: %s", rec.Code, rec.Body)
	}
	if !strings.Contains(f.logs.String(), "remote=192.0.2.1:1234") {
		t.Errorf("refusal not logged with the remote address:\n%s", f.logs)
	}
}

// The Go runtime's profiles are on the admin listener, behind its
// authentication: served to an authenticated caller, refused to others.
func TestPprof(t *testing.T) {
	f := newFixture(t, nil)
	ts := httptest.NewServer(f.srv.Handler()) // loopback: allowed without a token
	defer ts.Close()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/goroutine?debug=1"} {
		resp, err := ts.Client().Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("GET %s: %d, %d bytes", path, resp.StatusCode, len(body))
		}
	}
	req := httptest.NewRequest("GET", "/debug/pprof/heap", nil) // RemoteAddr 192.0.2.1, no credentials
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("remote without credentials: status %d, want 403", rec.Code)
	}
	req = httptest.NewRequest("POST", "/debug/pprof/heap", nil)
	req.RemoteAddr = "127.0.0.1:1234"
	rec = httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: status %d, want 405", rec.Code)
	}
}
