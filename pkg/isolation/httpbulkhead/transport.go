package httpbulkhead

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
)

// maxRetired bounds how many transports replaced after a limit change are
// remembered for CloseIdleConnections (their idle connections also expire
// by IdleConnTimeout).
const maxRetired = 4

// Transport is client-side semaphore isolation: an http.RoundTripper for one
// dependency; see the package documentation. Create it with NewTransport.
type Transport struct {
	lim *bulkhead.Limiter
	o   options

	custom   http.RoundTripper // used as is when the base is not an *http.Transport
	template *http.Transport   // otherwise cloned, never used itself

	mu      sync.Mutex // serialises re-matching; guards retired
	matched atomic.Pointer[matchedTransport]
	retired []*http.Transport
}

type matchedTransport struct {
	limit int
	t     *http.Transport
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a RoundTripper that runs requests through base under
// lim. A nil base means http.DefaultTransport. When base is an
// *http.Transport, requests go through a clone of it matched to the limit
// (MatchTransport) and base itself is never used; any other RoundTripper is
// used as is, and matching its connection limits is up to you.
func NewTransport(lim *bulkhead.Limiter, base http.RoundTripper, opts ...Option) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{lim: lim, o: buildOptions(opts)}
	if ht, ok := base.(*http.Transport); ok {
		t.template = ht
	} else {
		t.custom = base
	}
	return t
}

// MatchTransport returns a clone of base whose connection limits match a
// bulkhead of limit permits: MaxConnsPerHost = MaxIdleConnsPerHost = limit
// (and MaxIdleConns at least limit when it is set).
func MatchTransport(base *http.Transport, limit int) *http.Transport {
	t := base.Clone()
	t.MaxConnsPerHost = limit
	t.MaxIdleConnsPerHost = limit
	if t.MaxIdleConns != 0 && t.MaxIdleConns < limit {
		t.MaxIdleConns = limit
	}
	return t
}

// RoundTrip takes a permit for req's class, sends req, and hands the
// permit to the response body, which gives it back at EOF, on a read error
// or on Close. A rejection returns an error wrapping the bulkhead's
// sentinel (or req's context error) without sending anything.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var start time.Time
	if t.o.observer != nil {
		start = time.Now()
	}
	permit, err := t.lim.Acquire(req.Context(), t.o.priority(req.Header))
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("httpbulkhead: %s: %w", t.lim.Name(), err)
	}
	h := &hold{permit: permit, name: t.lim.Name(), obs: t.o.observer}
	if h.obs != nil {
		h.granted = time.Now()
		h.obs.Admitted(h.name, h.granted.Sub(start))
	}
	resp, err := t.roundTripper().RoundTrip(req)
	if err != nil {
		h.end(true)
		return nil, err
	}
	h.failed = resp.StatusCode >= 500
	if resp.Body == nil || resp.Body == http.NoBody || resp.StatusCode == http.StatusSwitchingProtocols {
		// Nothing to read, or an upgraded connection (not counted: its body
		// must stay an io.ReadWriteCloser).
		h.end(h.failed)
		return resp, nil
	}
	resp.Body = &body{ReadCloser: resp.Body, hold: h}
	return resp, nil
}

// CloseIdleConnections closes the idle connections of the transports in use.
func (t *Transport) CloseIdleConnections() {
	if t.custom != nil {
		if c, ok := t.custom.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.matched.Load(); m != nil {
		m.t.CloseIdleConnections()
	}
	for _, r := range t.retired {
		r.CloseIdleConnections()
	}
}

// roundTripper returns the RoundTripper for the next request: the custom
// one, or the clone matched to the limiter's current limit.
func (t *Transport) roundTripper() http.RoundTripper {
	if t.custom != nil {
		return t.custom
	}
	limit := t.lim.Settings().MaxConcurrent
	if m := t.matched.Load(); m != nil && m.limit == limit {
		return m.t
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.matched.Load()
	if old != nil && old.limit == limit {
		return old.t
	}
	m := &matchedTransport{limit: limit, t: MatchTransport(t.template, limit)}
	t.matched.Store(m)
	if old != nil {
		// Requests in flight on old finish there; its idle connections go.
		old.t.CloseIdleConnections()
		t.retired = append(t.retired, old.t)
		if len(t.retired) > maxRetired {
			t.retired = t.retired[1:]
		}
	}
	return m.t
}

// hold is a permit held by a request until its response is consumed.
type hold struct {
	permit  bulkhead.Permit
	name    string
	obs     isolation.Observer
	granted time.Time
	failed  bool
	done    atomic.Bool
}

// end releases the permit once and reports the outcome.
func (h *hold) end(failed bool) {
	if !h.done.CompareAndSwap(false, true) {
		return
	}
	h.permit.Release()
	if h.obs != nil {
		h.obs.Finished(h.name, time.Since(h.granted), failed)
	}
}

// body gives the permit back when the response has been read or closed.
type body struct {
	io.ReadCloser
	hold *hold
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.hold.end(b.hold.failed || err != io.EOF)
	}
	return n, err
}

func (b *body) Close() error {
	err := b.ReadCloser.Close()
	b.hold.end(b.hold.failed)
	return err
}
