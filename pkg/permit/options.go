package permit

import (
	"math/bits"
	"time"
)

// Defaults of the options.
const (
	DefaultShards        = 64
	DefaultMaxLeases     = 1_000_000
	DefaultSweepInterval = 500 * time.Millisecond
	DefaultTombstones    = 4096

	// DefaultHeartbeatInterval is how often Envoy logs each request in
	// flight (its access_log_flush_interval) in the shipped configurations.
	DefaultHeartbeatInterval = time.Second
	// DefaultHeartbeatTTL is the lease a periodic entry renews: three
	// intervals, so that one late or lost entry never ends a running
	// request's permit.
	DefaultHeartbeatTTL = 3 * DefaultHeartbeatInterval
	// DefaultRecoveryWindow is how long a starting daemon pauses admissions
	// while running requests' periodic entries tell it which permits are in
	// use: one interval and a half.
	DefaultRecoveryWindow = DefaultHeartbeatInterval * 3 / 2

	maxShards = 1 << 12
)

// Option configures a Ledger.
type Option func(*options)

type options struct {
	shards     int
	maxLeases  int
	observer   Observer
	interval   time.Duration
	tombstones int
}

func defaultOptions() options {
	return options{
		shards:     DefaultShards,
		maxLeases:  DefaultMaxLeases,
		observer:   nopObserver{},
		interval:   DefaultSweepInterval,
		tombstones: DefaultTombstones,
	}
}

// WithShards sets the number of shards. It is rounded up to a power of two
// and capped at 4096; n < 1 keeps the default (64).
func WithShards(n int) Option {
	return func(o *options) {
		if n < 1 {
			return
		}
		n = min(n, maxShards)
		o.shards = 1 << bits.Len(uint(n-1))
	}
}

// WithMaxLeases caps the number of live leases; Grant beyond it is ErrFull.
// n < 1 keeps the default (1,000,000).
func WithMaxLeases(n int) Option {
	return func(o *options) {
		if n >= 1 {
			o.maxLeases = n
		}
	}
}

// WithObserver sets the observer of ended leases and ignored releases; nil
// keeps the default, which does nothing.
func WithObserver(obs Observer) Option {
	return func(o *options) {
		if obs != nil {
			o.observer = obs
		}
	}
}

// WithSweepInterval sets how often Run sweeps; d <= 0 keeps the default
// (500ms).
func WithSweepInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.interval = d
		}
	}
}

// WithTombstones sets how many ended tokens each shard remembers to tell a
// Duplicate release from an Unknown one: at least the last n/2 and at most
// the last n (rounded up to even). 0 remembers none (every repeated release
// is Unknown); n < 0 keeps the default (4096).
func WithTombstones(n int) Option {
	return func(o *options) {
		if n >= 0 {
			o.tombstones = n
		}
	}
}
