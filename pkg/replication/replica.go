package replication

import (
	"context"
	"log/slog"

	"golang.org/x/sync/errgroup"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisledger"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
)

// Replica is a replica's part in the Redis ledger (ledger.backend: redis):
// the client and its identity, the ledger, the same under its unavailable
// policy (Fallback: the backend the servers are given), and, once
// Replicate made it, the replicator of what the ledger does not hold.
type Replica struct {
	Store    Store
	Ledger   *redisledger.Ledger
	Fallback *redisledger.Fallback
	// Capacity is the backend with capacity leases over Fallback
	// (ledger.redis.capacity_leases); nil when they are off.
	Capacity *redisledger.Capacity
	Repl     *Replicator
	log      *slog.Logger
}

// Parts are what a replica's shared ledger is built with besides its
// configuration.
type Parts struct {
	// Leases keeps the permits admitted from the capacity leases; its
	// owner sweeps it.
	Leases *permit.Memory
	// Known reports whether a bulkhead is configured.
	Known    func(bulkhead string) bool
	Observer permit.Observer
	// Recorder hears the ledger's calls and changes of state (the Gate).
	Recorder redisledger.Recorder
	// FailOpen counts the Checks admitted without a permit.
	FailOpen redisledger.FallbackRecorder
	Log      *slog.Logger
}

// NewReplica builds the shared ledger of cfg. It connects nothing yet: Run
// does.
func NewReplica(cfg *config.Config, p Parts) (*Replica, error) {
	st, err := NewStore(cfg.Ledger.Redis)
	if err != nil {
		return nil, err
	}
	log := p.Log.With("component", "ledger", "replica", st.Replica, "redis", st.Where)
	l := redisledger.New(st.Client, redisledger.Config{
		Prefix:    st.Prefix,
		Replica:   st.Replica,
		Timeout:   cfg.Ledger.Redis.Timeout,
		Recovery:  cfg.Leases.RecoveryWindow,
		Heartbeat: cfg.Leases.Heartbeat(),
		Known:     p.Known,
	}, p.Observer, p.Recorder, log)
	s := &Replica{Store: st, Ledger: l, Fallback: redisledger.NewFallback(l, cfg.Ledger.OnUnavailable, p.FailOpen), log: log}
	if cfg.Ledger.Redis.CapacityLeases {
		s.Capacity = redisledger.NewCapacity(l, s.Fallback, p.Leases)
	}
	return s, nil
}

// Backend is the admission.Ledger the servers are given: the capacity
// leases over the Fallback when they are on, else the Fallback.
func (s *Replica) Backend() admission.Ledger {
	if s.Capacity != nil {
		return s.Capacity
	}
	return s.Fallback
}

// Replicate makes the replicator of the breakers' windows, the sizing
// observer's counts and the admin overrides; it runs with the ledger (Run).
func (s *Replica) Replicate(breakers *breaker.Set, obs *sizing.Observer) *Replicator {
	s.Repl = New(s.Store, s.Ledger.State, breakers, obs, WithLogger(s.log))
	return s.Repl
}

// Run keeps the ledger (with its capacity leases) and the replicator going
// until ctx ends, then closes the client they share. reg is the configured
// bulkheads; apply receives the other replicas' overrides.
func (s *Replica) Run(ctx context.Context, reg *bulkhead.Registry, apply Applier) error {
	var g errgroup.Group
	g.Go(func() error { return s.Fallback.Run(ctx, reg) })
	if s.Capacity != nil {
		g.Go(func() error { return s.Capacity.Run(ctx, reg) })
	}
	if s.Repl != nil {
		g.Go(func() error { return s.Repl.Run(ctx, apply) })
	}
	err := g.Wait()
	s.Store.Client.Close()
	return err
}
