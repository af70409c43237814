package httpbulkhead

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func registry(t *testing.T, want map[string]bulkhead.Settings) *bulkhead.Registry {
	t.Helper()
	r := bulkhead.NewRegistry()
	if _, err := r.Apply(want); err != nil {
		t.Fatal(err)
	}
	return r
}

// gatedHandler blocks in ServeHTTP until release is closed; entered gets
// one value per request that got in.
type gatedHandler struct {
	entered chan string
	release chan struct{}
}

func newGated() *gatedHandler {
	return &gatedHandler{entered: make(chan string, 64), release: make(chan struct{})}
}

func (g *gatedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.entered <- r.URL.Path
	<-g.release
	w.WriteHeader(http.StatusOK)
}

func serve(h http.Handler, r *http.Request) <-chan *httptest.ResponseRecorder {
	ch := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		ch <- rec
	}()
	return ch
}

func get(path, prio string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if prio != "" {
		r.Header.Set("x-bulkhead-priority", prio)
	}
	return r
}

func byPath(r *http.Request) string {
	return map[string]string{"/catalog": "catalog", "/free": ""}[r.URL.Path]
}

func wait[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
		var zero T
		return zero
	}
}

// TestHandlerPriorities: with one permit reserved for critical, a second
// normal request is rejected the sidecar's way while a critical one is
// admitted.
func TestHandlerPriorities(t *testing.T) {
	reg := registry(t, map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 2, ReserveCritical: 0.5}})
	g := newGated()
	h := NewHandler(g, reg, byPath, WithRetryAfter(1500*time.Millisecond))
	first := serve(h, get("/catalog", ""))
	wait(t, g.entered)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, get("/catalog", "normal"))
	var body rejectionBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	hd := rec.Header()
	if rec.Code != 503 || hd.Get("Retry-After") != "2" || hd.Get("x-bulkhead-reason") != "queue_full" ||
		hd.Get("x-bulkhead") != "catalog" || body != (rejectionBody{"bulkhead rejected", "catalog", "queue_full"}) {
		t.Fatalf("rejection: %d %v %q", rec.Code, hd, rec.Body.String())
	}

	crit := serve(h, get("/catalog", "critical"))
	wait(t, g.entered)
	close(g.release)
	for _, ch := range []<-chan *httptest.ResponseRecorder{first, crit} {
		if rec := wait(t, ch); rec.Code != 200 {
			t.Fatalf("admitted request answered %d", rec.Code)
		}
	}
	if s := reg.Get("catalog").Snapshot(); s.InUse != 0 || s.Admitted[bulkhead.Critical] != 1 || s.Admitted[bulkhead.Normal] != 1 {
		t.Fatalf("snapshot %+v", s)
	}
}

func TestHandlerKeys(t *testing.T) {
	reg := registry(t, map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 1}})
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	key := func(r *http.Request) string { return r.URL.Query().Get("k") }
	tests := []struct {
		name       string
		key        string
		opts       []Option
		wantStatus int
		wantReason string
	}{
		{name: "known", key: "catalog", wantStatus: 204},
		{name: "empty key is unguarded", key: "", wantStatus: 204},
		{name: "unknown is rejected", key: "nope", wantStatus: 503, wantReason: "unknown_bulkhead"},
		{name: "unknown with status 429", key: "nope", opts: []Option{WithStatus(429)}, wantStatus: 429, wantReason: "unknown_bulkhead"},
		{name: "unknown allowed", key: "nope", opts: []Option{WithAllowUnknown()}, wantStatus: 204},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			NewHandler(ok, reg, key, tt.opts...).ServeHTTP(rec, get("/?k="+tt.key, ""))
			if rec.Code != tt.wantStatus || rec.Header().Get("x-bulkhead-reason") != tt.wantReason {
				t.Fatalf("got %d %q", rec.Code, rec.Header().Get("x-bulkhead-reason"))
			}
		})
	}
}

// TestHandlerWaitEnds: a client gone while queued gets no answer; a
// deadline while queued is answered with reason timeout.
func TestHandlerWaitEnds(t *testing.T) {
	reg := registry(t, map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 1, MaxQueue: 4}})
	g := newGated()
	h := NewHandler(g, reg, byPath)
	first := serve(h, get("/catalog", ""))
	wait(t, g.entered)

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, get("/catalog", "").WithContext(gone))
	if rec.Body.Len() != 0 || rec.Header().Get("x-bulkhead-reason") != "" {
		t.Fatalf("answered a client that is gone: %d %q", rec.Code, rec.Body.String())
	}
	late, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, get("/catalog", "").WithContext(late))
	if rec.Code != 503 || rec.Header().Get("x-bulkhead-reason") != "timeout" {
		t.Fatalf("deadline: %d %q", rec.Code, rec.Header().Get("x-bulkhead-reason"))
	}
	close(g.release)
	wait(t, first)
}

// TestHandlerPanic: the permit is released and the panic goes on to
// net/http.
func TestHandlerPanic(t *testing.T) {
	reg := registry(t, map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 1}})
	obs := &observer{}
	h := NewHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }), reg, byPath, WithObserver(obs))
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Fatalf("recovered %v", v)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), get("/catalog", ""))
	}()
	if in := reg.Get("catalog").Snapshot().InUse; in != 0 {
		t.Fatalf("InUse after panic = %d", in)
	}
	if a, f, bad := obs.counts(); a != 1 || f != 1 || bad != 1 {
		t.Fatalf("observer %+v", obs)
	}
}

func TestHandlerObserverStatus(t *testing.T) {
	reg := registry(t, map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 1}})
	obs := &observer{}
	code := 200
	h := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		w.(http.Flusher).Flush() // the wrapper keeps Flusher visible
	}), reg, byPath, WithObserver(obs))
	for _, c := range []int{200, 404, 500, 503} {
		code = c
		h.ServeHTTP(httptest.NewRecorder(), get("/catalog", ""))
	}
	if a, f, bad := obs.counts(); a != 4 || f != 4 || bad != 2 {
		t.Fatalf("observer %+v", obs)
	}
}

type observer struct {
	mu                         sync.Mutex
	admitted, finished, failed int
}

func (o *observer) Admitted(string, time.Duration) { o.mu.Lock(); o.admitted++; o.mu.Unlock() }

func (o *observer) Finished(_ string, _ time.Duration, failed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished++
	if failed {
		o.failed++
	}
}

func (o *observer) counts() (int, int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.admitted, o.finished, o.failed
}
