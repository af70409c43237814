package server

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisledger"
	"github.com/bulkhead-mesh/bulkhead/pkg/replication"
)

// shared is the runner's part for ledger.backend: redis: the Redis store,
// the shared ledger, the same under its unavailable policy, and the
// replication of what the ledger does not hold.
type shared struct {
	store    replication.Store
	ledger   *redisledger.Ledger
	fallback *redisledger.Fallback
	repl     *replication.Replicator
	log      *slog.Logger
}

// newShared connects nothing yet: the ledger's Run does.
func newShared(cfg *config.Config, hb permit.Heartbeat, known func(string) bool, log *slog.Logger, obs permit.Observer,
	rec redisledger.Recorder) (*shared, error) {
	st, err := replication.NewStore(cfg.Ledger.Redis)
	if err != nil {
		return nil, err
	}
	log = log.With("component", "ledger", "replica", st.Replica, "redis", st.Where)
	localFor := time.Duration(0)
	if cfg.Ledger.OnUnavailable == admission.LocalShare {
		localFor = cfg.Ledger.LocalShareFor
	}
	l := redisledger.New(st.Client, redisledger.Config{
		LocalShareFor: localFor,
		Prefix:        st.Prefix,
		Replica:       st.Replica,
		Timeout:       cfg.Ledger.Redis.Timeout,
		Recovery:      cfg.Leases.RecoveryWindow,
		Heartbeat:     hb,
		Known:         known,
	}, obs, rec, log)
	return &shared{store: st, ledger: l, log: log}, nil
}

// run keeps the shared ledger and the replication going until ctx ends,
// then closes the client they share.
func (s *shared) run(ctx context.Context, reg *bulkhead.Registry, apply replication.Applier) error {
	var g errgroup.Group
	g.Go(func() error { return s.fallback.Run(ctx, reg) })
	g.Go(func() error { return s.repl.Run(ctx, apply) })
	err := g.Wait()
	s.store.Client.Close()
	return err
}
