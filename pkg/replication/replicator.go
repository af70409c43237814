package replication

import (
	"context"
	"log/slog"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/control"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
)

// Applier applies an admin override made at another replica (ov set), or
// its reset (ov nil); *control.Control is one. An error wrapping
// control.ErrNotFound (a bulkhead this replica does not have) is not
// logged.
type Applier interface {
	ApplyRemote(name string, ov *control.Override) error
}

// Replicator shares with the other replicas, through the store, what the
// Redis ledger does not hold: the circuit breakers' windows, the requests
// that ended here (for sizing) and the admin overrides. See the package
// documentation.
type Replicator struct {
	state     func() admission.State
	log       *slog.Logger
	clock     clock.Clock
	breakers  *breakerSync
	sizing    *sizingShare
	overrides *overrideSync

	// Run's own (one Run at a time).
	up        bool      // the store was available at the last look
	rounds    int       // since Run started
	errLogged time.Time // when a failed call was last logged
}

// Option configures a Replicator.
type Option func(*Replicator)

// WithLogger sets the logger (default: discard).
func WithLogger(log *slog.Logger) Option { return func(r *Replicator) { r.log = log } }

// WithClock sets the clock of the rounds (default: clock.Real).
func WithClock(c clock.Clock) Option { return func(r *Replicator) { r.clock = c } }

// New returns the replication of breakers and of obs's requests, and of
// the admin overrides its Override hears, through store; state is the
// Redis ledger's availability (redisledger.Ledger.State), the one signal
// of whether the store answers. It starts nothing: Run does.
func New(store Store, state func() admission.State, breakers *breaker.Set, obs *sizing.Observer, opts ...Option) *Replicator {
	r := &Replicator{state: state, log: slog.New(slog.DiscardHandler), clock: clock.Real{}, up: true}
	for _, o := range opts {
		o(r)
	}
	r.breakers = &breakerSync{store: store, set: breakers, log: r.log}
	r.sizing = &sizingShare{store: store, obs: obs, state: state, log: r.log, timeout: sizingReadTimeout}
	r.overrides = newOverrideSync(store.Client, store.Prefix, r.log)
	return r
}

// Override is the control.OverrideSink that carries each admin override
// made here to the other replicas. It never blocks; safe for concurrent
// use.
func (r *Replicator) Override(name string, ov *control.Override) { r.overrides.sink(name, ov) }

// Peers are the other replicas' requests, for the sizing observer
// (sizing.Observer.SetPeers); safe for concurrent use. While the store is
// unavailable they are ErrUnavailable.
func (r *Replicator) Peers() sizing.Peers { return r.sizing }

// roundsPerSecond: the breakers are shared every round (breakerSyncEvery),
// the sizing counts and the overrides every roundsPerSecond rounds.
const roundsPerSecond = int(time.Second / breakerSyncEvery)

// errorLogEvery bounds how often a failed call of a store that the ledger
// still finds available is logged.
const errorLogEvery = 30 * time.Second

// Run replicates until ctx ends, applying the overrides made at the other
// replicas to apply, then takes this replica's breaker windows out of the
// store (best effort, for a second at most) and returns nil. Its one
// goroutine does every part of the work: a round every breakerSyncEvery,
// and an override made here written as soon as it is heard of. Call it
// once.
func (r *Replicator) Run(ctx context.Context, apply Applier) error {
	t := r.clock.NewTimer(0) // the first round at once: a replica that starts applies the overrides in force
	for {
		select {
		case <-ctx.Done():
			t.Stop()
			if r.up {
				r.breakers.leave()
			}
			return nil
		case ev := <-r.overrides.events:
			r.overrides.take(ev)
			if r.available() {
				r.failed(ctx, r.overrides.flush(ctx))
			}
		case <-t.C():
			r.round(ctx, apply)
			t = r.clock.NewTimer(breakerSyncEvery)
		}
	}
}

// round is one tick of Run: the breakers always, the sizing counts and the
// overrides every roundsPerSecond rounds; nothing while the store is
// unavailable.
func (r *Replicator) round(ctx context.Context, apply Applier) {
	n := r.rounds
	r.rounds++
	if !r.available() {
		return
	}
	now := r.clock.Now()
	r.failed(ctx, r.breakers.sync(ctx, now, breakerSyncEvery))
	if n%roundsPerSecond != 0 {
		return
	}
	r.failed(ctx, r.sizing.write(ctx, now.Unix()))
	r.failed(ctx, r.overrides.flush(ctx))
	r.failed(ctx, r.overrides.pull(ctx, apply))
}

// available reads the ledger's availability, and is the one place that
// tells of a change: when the store becomes unavailable, the breakers drop
// the peers' windows and decide on their own outcomes, suggestions are
// refused (sizingShare.Ended) and overrides made here wait; when it
// answers again (Strict), sharing resumes.
func (r *Replicator) available() bool {
	up := r.state() != admission.Unavailable
	switch {
	case up == r.up:
	case !up:
		r.log.Warn("circuit breakers, sizing counts and admin overrides not shared with the other replicas until the redis ledger answers: " +
			"each breaker decides on its own outcomes, suggestions are refused, overrides made here wait")
		r.breakers.drop()
	default:
		r.log.Info("circuit breakers, sizing counts and admin overrides shared with the other replicas again")
	}
	r.up = up
	return up
}

// failed logs err, the error of a call to a store the ledger finds
// available (it has not noticed yet, or the store refuses this call): the
// first at once, then at most every errorLogEvery. It decides nothing:
// the ledger's own calls judge whether Redis answers, and the work is
// retried at the next round.
func (r *Replicator) failed(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	now := r.clock.Now()
	if !r.errLogged.IsZero() && now.Sub(r.errLogged) < errorLogEvery {
		return
	}
	r.errLogged = now
	r.log.Warn("not shared with the other replicas this round; retried", "err", err)
}
