package isolation

import (
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// RejectionPolicy says what a Pool does with a call its bulkhead rejects
// (queue_full, shed, or timeout while queued).
type RejectionPolicy uint8

const (
	// Abort returns the rejection to the caller; Do then calls the call's
	// fallback when it has one. The default.
	Abort RejectionPolicy = iota
	// CallerRuns runs the call on the caller's goroutine, outside the
	// bulkhead: the submitter slows down instead of failing, but the
	// dependency is not protected from it. Never applies to a closed pool
	// or to a caller whose context ended.
	CallerRuns
)

// String returns the policy's name.
func (p RejectionPolicy) String() string {
	switch p {
	case Abort:
		return "abort"
	case CallerRuns:
		return "caller_runs"
	}
	return "invalid"
}

type options struct {
	observer Observer
	clock    clock.Clock
	policy   RejectionPolicy
	timeout  time.Duration
}

func buildOptions[O PoolOption](opts []O) options {
	o := options{clock: clock.Real{}}
	for _, f := range opts {
		f.applyPool(&o)
	}
	return o
}

// Option configures a Semaphore or a Pool. Every Option is a PoolOption.
type Option func(*options)

func (f Option) applyPool(o *options) { f(o) }

// PoolOption configures a Pool: an Option, WithPolicy or WithCallTimeout.
type PoolOption interface {
	applyPool(*options)
}

type poolOption func(*options)

func (f poolOption) applyPool(o *options) { f(o) }

// WithObserver reports admitted and finished calls to obs (nil: none).
func WithObserver(obs Observer) Option { return func(o *options) { o.observer = obs } }

// WithClock sets the clock used for wait, hold and timeout measurements
// (default: the real clock). A Pool passes it to its limiter.
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithPolicy sets the pool's RejectionPolicy (default Abort).
func WithPolicy(p RejectionPolicy) PoolOption { return poolOption(func(o *options) { o.policy = p }) }

// WithCallTimeout bounds how long a caller waits for a pool call, from
// submission to result (0, the default: as long as its context allows).
// The queue wait counts against it (a call still queued when it passes is
// rejected with bulkhead.ErrTimeout); a call still running gets
// ErrCallTimeout and its context is cancelled.
func WithCallTimeout(d time.Duration) PoolOption {
	return poolOption(func(o *options) { o.timeout = max(d, 0) })
}
