package httpbulkhead

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// upstream is a server on 127.0.0.1 whose handler waits on a gate and
// counts the requests it is serving at once.
type upstream struct {
	*httptest.Server
	g             *gatedHandler
	inFlight, max atomic.Int32
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{g: newGated()}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.inFlight.Add(1)
		defer u.inFlight.Add(-1)
		for old := u.max.Load(); n > old && !u.max.CompareAndSwap(old, n); old = u.max.Load() {
		}
		u.g.ServeHTTP(w, r)
		_, _ = io.WriteString(w, "hello")
	}))
	t.Cleanup(func() {
		select {
		case <-u.g.release:
		default:
			close(u.g.release)
		}
		u.Close()
	})
	return u
}

func newTransport(t *testing.T, lim *bulkhead.Limiter, opts ...Option) *Transport {
	tr := NewTransport(lim, nil, opts...)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// closeTracker records whether a request body was closed.
type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeTracker) Close() error { c.closed.Store(true); return nil }

// TestTransportBounds: in-flight requests never exceed the limit; a
// rejection is an error wrapping the sentinel, and its body is closed.
func TestTransportBounds(t *testing.T) {
	u := newUpstream(t)
	lim, _ := bulkhead.New("catalog", bulkhead.Settings{MaxConcurrent: 2})
	client := &http.Client{Transport: newTransport(t, lim)}
	type result struct {
		body string
		err  error
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			resp, err := client.Get(u.URL)
			if err != nil {
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			results <- result{string(b), err}
		}()
	}
	wait(t, u.g.entered)
	wait(t, u.g.entered)

	body := &closeTracker{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest(http.MethodPost, u.URL, body)
	_, err := client.Do(req)
	var ue *url.Error
	if !errors.Is(err, bulkhead.ErrQueueFull) || !errors.As(err, &ue) || !body.closed.Load() {
		t.Fatalf("third request: %v (body closed %v)", err, body.closed.Load())
	}
	close(u.g.release)
	for range 2 {
		if r := wait(t, results); r.err != nil || r.body != "hello" {
			t.Fatalf("admitted request: %+v", r)
		}
	}
	if m := u.max.Load(); m != 2 {
		t.Fatalf("upstream saw %d at once, want 2", m)
	}
	if in := lim.Snapshot().InUse; in != 0 {
		t.Fatalf("InUse = %d", in)
	}
}

// TestTransportHoldsUntilBodyConsumed: the permit is the response's until
// its body reports EOF or is closed.
func TestTransportHoldsUntilBodyConsumed(t *testing.T) {
	u := newUpstream(t)
	close(u.g.release)
	lim, _ := bulkhead.New("catalog", bulkhead.Settings{MaxConcurrent: 1})
	obs := &observer{}
	client := &http.Client{Transport: newTransport(t, lim, WithObserver(obs))}
	for _, consume := range []func(io.ReadCloser){
		func(b io.ReadCloser) { _, _ = io.ReadAll(b) },
		func(b io.ReadCloser) { _ = b.Close() },
	} {
		resp, err := client.Get(u.URL)
		if err != nil {
			t.Fatal(err)
		}
		<-u.g.entered
		if in := lim.Snapshot().InUse; in != 1 {
			t.Fatalf("InUse with the body unread = %d", in)
		}
		consume(resp.Body)
		if in := lim.Snapshot().InUse; in != 0 {
			t.Fatalf("InUse after the body = %d", in)
		}
		_ = resp.Body.Close()
	}
	if a, f, bad := obs.counts(); a != 2 || f != 2 || bad != 0 || lim.Snapshot().DuplicateReleases != 0 {
		t.Fatalf("observer %d %d %d", a, f, bad)
	}
}

// TestTransportErrorReleases: a failed round trip gives the permit back.
func TestTransportErrorReleases(t *testing.T) {
	u := httptest.NewServer(http.NotFoundHandler())
	addr := u.URL
	u.Close() // nothing listens there now
	lim, _ := bulkhead.New("catalog", bulkhead.Settings{MaxConcurrent: 1})
	client := &http.Client{Transport: newTransport(t, lim)}
	if _, err := client.Get(addr); err == nil || bulkhead.ReasonOf(err) != bulkhead.ReasonNone {
		t.Fatalf("err = %v", err)
	}
	if s := lim.Snapshot(); s.InUse != 0 || s.Released != 1 {
		t.Fatalf("snapshot %+v", s)
	}
}

// TestTransportMatchesLimit: requests run on a clone whose connection
// limits follow the limiter, also after a resize; the base is untouched.
func TestTransportMatchesLimit(t *testing.T) {
	u := newUpstream(t)
	close(u.g.release)
	base := http.DefaultTransport.(*http.Transport).Clone()
	lim, _ := bulkhead.New("catalog", bulkhead.Settings{MaxConcurrent: 3})
	tr := NewTransport(lim, base)
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	fetch := func() {
		resp, err := client.Get(u.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	fetch()
	m := tr.matched.Load()
	if m.t.MaxConnsPerHost != 3 || m.t.MaxIdleConnsPerHost != 3 || base.MaxConnsPerHost != 0 {
		t.Fatalf("matched %d/%d, base %d", m.t.MaxConnsPerHost, m.t.MaxIdleConnsPerHost, base.MaxConnsPerHost)
	}
	fetch()
	if tr.matched.Load() != m {
		t.Fatal("a new clone without a limit change")
	}
	if err := lim.Resize(bulkhead.Settings{MaxConcurrent: 8}); err != nil {
		t.Fatal(err)
	}
	fetch()
	if m2 := tr.matched.Load(); m2 == m || m2.t.MaxConnsPerHost != 8 || len(tr.retired) != 1 {
		t.Fatalf("after resize: %d, retired %d", m2.t.MaxConnsPerHost, len(tr.retired))
	}
}

// TestTransportCustomAndPriority: another RoundTripper is used as is, and
// the request's priority header picks its class.
func TestTransportCustomAndPriority(t *testing.T) {
	lim, _ := bulkhead.New("catalog", bulkhead.Settings{MaxConcurrent: 2, ReserveCritical: 0.5})
	hold := make(chan struct{})
	var calls atomic.Int32
	custom := roundTripFunc(func(*http.Request) (*http.Response, error) {
		if calls.Add(1) == 1 {
			<-hold
		}
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("ok"))}, nil
	})
	tr := NewTransport(lim, custom)
	first := make(chan error, 1)
	go func() {
		resp, err := tr.RoundTrip(httptest.NewRequest(http.MethodGet, "http://dep/", nil))
		if err == nil {
			err = resp.Body.Close()
		}
		first <- err
	}()
	testkit.Eventually(t, "the first request holds its permit", func() bool { return lim.Snapshot().InUse == 1 })
	if _, err := tr.RoundTrip(httptest.NewRequest(http.MethodGet, "http://dep/", nil)); !errors.Is(err, bulkhead.ErrQueueFull) {
		t.Fatalf("normal request: %v", err)
	}
	req := httptest.NewRequest(http.MethodGet, "http://dep/", nil)
	req.Header.Set("x-bulkhead-priority", "critical")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("critical request: %v", err)
	}
	_ = resp.Body.Close()
	close(hold)
	if err := wait(t, first); err != nil {
		t.Fatal(err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
