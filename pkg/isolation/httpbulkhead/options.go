package httpbulkhead

import (
	"net/http"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
)

// Limiters finds a bulkhead by key; *bulkhead.Registry is one.
type Limiters interface {
	Get(key string) *bulkhead.Limiter
}

// Option configures a Handler or a Transport. Options about rejection
// answers (WithStatus, WithRetryAfter, WithAllowUnknown) apply to Handler
// only.
type Option func(*options)

type options struct {
	priorityHeader string
	defaultPrio    bulkhead.Priority
	observer       isolation.Observer
	status         int
	retryAfter     time.Duration
	allowUnknown   bool
}

func buildOptions(opts []Option) options {
	o := options{
		priorityHeader: isolation.PriorityHeader,
		defaultPrio:    bulkhead.Normal,
		status:         http.StatusServiceUnavailable,
		retryAfter:     time.Second,
	}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WithPriorityHeader reads the class from header name (default
// x-bulkhead-priority; "" ignores headers).
func WithPriorityHeader(name string) Option { return func(o *options) { o.priorityHeader = name } }

// WithDefaultPriority is the class of requests without a valid priority
// header (default normal).
func WithDefaultPriority(p bulkhead.Priority) Option {
	return func(o *options) {
		if p.Valid() {
			o.defaultPrio = p
		}
	}
}

// WithObserver reports admitted and finished requests to obs. A request
// failed when it answered 5xx (Handler) or when the round trip failed or
// answered 5xx (Transport), or panicked.
func WithObserver(obs isolation.Observer) Option { return func(o *options) { o.observer = obs } }

// WithStatus is the HTTP status of rejections (default 503; 400..599).
func WithStatus(code int) Option {
	return func(o *options) {
		if code >= 400 && code <= 599 {
			o.status = code
		}
	}
}

// WithRetryAfter is the retry-after of rejections, sent in whole seconds
// rounded up, at least 1 (default 1s).
func WithRetryAfter(d time.Duration) Option { return func(o *options) { o.retryAfter = d } }

// WithAllowUnknown lets requests whose key names no bulkhead through
// unguarded; by default they are rejected with reason unknown_bulkhead. An
// empty key always passes unguarded.
func WithAllowUnknown() Option { return func(o *options) { o.allowUnknown = true } }

// priority returns the class named by the request's priority header, or
// the default.
func (o *options) priority(h http.Header) bulkhead.Priority {
	if o.priorityHeader == "" {
		return o.defaultPrio
	}
	v := h.Get(o.priorityHeader)
	if v == "" {
		return o.defaultPrio
	}
	p, err := bulkhead.ParsePriority(v)
	if err != nil {
		return o.defaultPrio
	}
	return p
}

func (o *options) retryAfterSeconds() int64 {
	return max(1, int64((o.retryAfter+time.Second-1)/time.Second))
}
