package grpcbulkhead

import (
	"context"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
)

// Limiters finds a bulkhead by key; *bulkhead.Registry is one.
type Limiters interface {
	Get(key string) *bulkhead.Limiter
}

// Option configures the interceptors. WithAllowUnknown applies to the
// server side only.
type Option func(*options)

type options struct {
	priorityKey  string
	defaultPrio  bulkhead.Priority
	observer     isolation.Observer
	retryAfter   time.Duration
	margin       time.Duration
	allowUnknown bool
}

func buildOptions(opts []Option) options {
	o := options{priorityKey: isolation.PriorityHeader, defaultPrio: bulkhead.Normal, retryAfter: time.Second}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WithPriorityKey reads the class from metadata key (default
// x-bulkhead-priority; "" ignores metadata). The server reads incoming
// metadata, the client outgoing metadata (which also reaches the server).
func WithPriorityKey(key string) Option { return func(o *options) { o.priorityKey = key } }

// WithDefaultPriority is the class of calls without valid priority metadata
// (default normal).
func WithDefaultPriority(p bulkhead.Priority) Option {
	return func(o *options) {
		if p.Valid() {
			o.defaultPrio = p
		}
	}
}

// WithObserver reports admitted and finished calls to obs. A call failed
// when it ended with a server-fault code (those HTTP maps to 5xx: Unknown,
// DeadlineExceeded, Unimplemented, Internal, Unavailable, DataLoss) or
// panicked.
func WithObserver(obs isolation.Observer) Option { return func(o *options) { o.observer = obs } }

// WithRetryAfter is the RetryInfo delay of rejections (default 1s).
func WithRetryAfter(d time.Duration) Option { return func(o *options) { o.retryAfter = max(d, 0) } }

// WithDeadlineMargin ends a wait for a permit d before the call's deadline,
// with reason timeout (default 0: waits end with the deadline itself).
func WithDeadlineMargin(d time.Duration) Option { return func(o *options) { o.margin = max(d, 0) } }

// WithAllowUnknown lets calls whose key names no bulkhead through
// unguarded; by default they are rejected with reason unknown_bulkhead. An
// empty key always passes unguarded.
func WithAllowUnknown() Option { return func(o *options) { o.allowUnknown = true } }

func (o *options) priority(values []string) bulkhead.Priority {
	if len(values) == 0 {
		return o.defaultPrio
	}
	p, err := bulkhead.ParsePriority(values[0])
	if err != nil {
		return o.defaultPrio
	}
	return p
}

func (o *options) incomingPriority(ctx context.Context) bulkhead.Priority {
	if o.priorityKey == "" {
		return o.defaultPrio
	}
	return o.priority(metadata.ValueFromIncomingContext(ctx, o.priorityKey))
}

func (o *options) outgoingPriority(ctx context.Context) bulkhead.Priority {
	if o.priorityKey == "" {
		return o.defaultPrio
	}
	return o.priority(metadata.ValueFromOutgoingContext(ctx, o.priorityKey))
}
