package httpbulkhead

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
)

// HeaderBulkhead names the bulkhead of a rejection (as the sidecar does).
const HeaderBulkhead = "x-bulkhead"

// maxEchoedKey bounds how much of a key a rejection echoes back.
const maxEchoedKey = 64

// Handler is server-side semaphore isolation for net/http; see the package
// documentation. Create it with NewHandler.
type Handler struct {
	next http.Handler
	lims Limiters
	key  func(*http.Request) string
	o    options
}

var _ http.Handler = (*Handler)(nil)

// NewHandler guards next with the bulkhead that key names for each request
// (say, its route; "" leaves the request unguarded), taken from lims.
func NewHandler(next http.Handler, lims Limiters, key func(*http.Request) string, opts ...Option) *Handler {
	return &Handler{next: next, lims: lims, key: key, o: buildOptions(opts)}
}

// ServeHTTP admits, queues or rejects the request, then serves it with the
// wrapped handler while holding a permit.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := h.key(r)
	if key == "" {
		h.next.ServeHTTP(w, r)
		return
	}
	lim := h.lims.Get(key)
	if lim == nil {
		if h.o.allowUnknown {
			h.next.ServeHTTP(w, r)
			return
		}
		h.reject(w, key, bulkhead.ReasonUnknownBulkhead)
		return
	}
	var start time.Time
	if h.o.observer != nil {
		start = time.Now()
	}
	permit, err := lim.Acquire(r.Context(), h.o.priority(r.Header))
	if err != nil {
		switch {
		case errors.Is(err, context.Canceled):
			// The client went away while it waited: nobody reads an answer.
		case errors.Is(err, context.DeadlineExceeded):
			h.reject(w, key, bulkhead.ReasonTimeout)
		default:
			h.reject(w, key, bulkhead.ReasonOf(err))
		}
		return
	}
	defer permit.Release() // also when next panics
	if h.o.observer == nil {
		h.next.ServeHTTP(w, r)
		return
	}
	granted := time.Now()
	h.o.observer.Admitted(key, granted.Sub(start))
	sw := &statusWriter{ResponseWriter: w}
	returned := false
	defer func() {
		h.o.observer.Finished(key, time.Since(granted), !returned || sw.status >= 500)
	}()
	h.next.ServeHTTP(sw, r)
	returned = true
}

type rejectionBody struct {
	Error    string `json:"error"`
	Bulkhead string `json:"bulkhead"`
	Reason   string `json:"reason"`
}

// reject answers a rejection the way the sidecar does.
func (h *Handler) reject(w http.ResponseWriter, key string, reason bulkhead.Reason) {
	if len(key) > maxEchoedKey {
		key = key[:maxEchoedKey]
	}
	body, _ := json.Marshal(rejectionBody{Error: "bulkhead rejected", Bulkhead: key, Reason: reason.String()})
	hd := w.Header()
	hd.Set("Retry-After", strconv.FormatInt(h.o.retryAfterSeconds(), 10))
	hd.Set(isolation.ReasonHeader, reason.String())
	hd.Set(HeaderBulkhead, key)
	hd.Set("Content-Type", "application/json")
	w.WriteHeader(h.o.status)
	_, _ = w.Write(append(body, '\n'))
}

// statusWriter records the final status the wrapped handler sent. Unwrap
// lets http.ResponseController reach the original writer's features.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush keeps the wrapped writer's http.Flusher visible to handlers that
// type-assert it.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
