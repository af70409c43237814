package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisledger"
	"github.com/bulkhead-mesh/bulkhead/pkg/replication"
)

// shared is the runner's part for ledger.backend: redis: the Redis client,
// the shared ledger, and the same under its unavailable policy.
type shared struct {
	client   redis.UniversalClient
	ledger   *redisledger.Ledger
	fallback *redisledger.Fallback
	log      *slog.Logger
	store    replication.Store // client's, with the key prefix and this replica's id
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
	return &shared{client: st.Client, ledger: l, log: log, store: st}, nil
}

// run keeps the shared ledger and the shares going until ctx ends.
func (s *shared) run(ctx context.Context, reg *bulkhead.Registry) error {
	err := s.fallback.Run(ctx, reg)
	s.client.Close()
	return err
}
