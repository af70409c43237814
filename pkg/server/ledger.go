package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisledger"
)

// shared is the runner's part for ledger.backend: redis: the Redis client,
// the shared ledger, and the bulkheads at this replica's share of each
// limit (ledger.on_unavailable: local_share).
type shared struct {
	client redis.UniversalClient
	ledger *redisledger.Ledger
	shares *bulkhead.Registry
	log    *slog.Logger
	// overrides carries admin overrides to the other replicas.
	overrides *overrideSync
	// breakers makes the circuit breakers mesh-wide across the replicas,
	// sizing the suggestions.
	breakers *breakerSync
	sizing   *sizingShare
	replica  string // this replica's id in Redis
}

// newShared connects nothing yet: the ledger's Run does.
func newShared(cfg *config.Config, log *slog.Logger, obs permit.Observer, rec redisledger.Recorder) (*shared, error) {
	client, err := newRedisClient(cfg.Ledger.Redis)
	if err != nil {
		return nil, err
	}
	replica, err := replicaID()
	if err != nil {
		client.Close()
		return nil, err
	}
	where := cfg.Ledger.Redis.Address
	if where == "" {
		where = "sentinel " + cfg.Ledger.Redis.Sentinel.Master + " at " + strings.Join(cfg.Ledger.Redis.Sentinel.Addresses, ",")
	}
	log = log.With("component", "ledger", "replica", replica, "redis", where)
	localFor := time.Duration(0)
	if cfg.Ledger.OnUnavailable == authz.LocalShare {
		localFor = cfg.Ledger.LocalShareFor
	}
	l := redisledger.New(client, redisledger.Config{
		LocalShareFor: localFor,
		Prefix:        cfg.Ledger.Redis.Prefix,
		Replica:       replica,
		Timeout:       cfg.Ledger.Redis.Timeout,
		Recovery:      cfg.Leases.RecoveryWindow,
		Adopt:         cfg.Leases.HeartbeatTTL + cfg.Leases.HeartbeatInterval,
	}, obs, rec, log)
	return &shared{client: client, ledger: l, shares: bulkhead.NewRegistry(), log: log, replica: replica}, nil
}

// replicaID names this process among the replicas: the host name (the
// pod's, in Kubernetes) and random bits, so that a restarted pod is a new
// replica.
func replicaID() (string, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "bulkhead"
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return strings.ReplaceAll(host, "\n", "") + "-" + hex.EncodeToString(b[:]), nil
}

// newRedisClient builds the client of ledger.redis. Commands are not
// retried by the client (MaxRetries -1); the cluster client still retries
// one after a broken connection (up to its MaxRedirects) although the script
// may have run, and the ledger's scripts are idempotent per token for that.
func newRedisClient(c config.Redis) (redis.UniversalClient, error) {
	o := &redis.UniversalOptions{
		DB:                    c.DB,
		Username:              c.Username,
		DialTimeout:           c.DialTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	}
	if c.Address != "" {
		o.Addrs, o.IsClusterMode = []string{c.Address}, c.Cluster
	} else {
		o.Addrs, o.MasterName = c.Sentinel.Addresses, c.Sentinel.Master
	}
	var err error
	if o.Password, err = secret("ledger.redis.password_file", c.PasswordFile); err != nil {
		return nil, err
	}
	if o.SentinelPassword, err = secret("ledger.redis.sentinel.password_file", c.Sentinel.PasswordFile); err != nil {
		return nil, err
	}
	if c.TLS.Enabled {
		if o.TLSConfig, err = redisTLS(c.TLS); err != nil {
			return nil, err
		}
	}
	return redis.NewUniversalClient(o), nil
}

// secret reads a password file ("" for none) with creds, as the admin
// token is read: whitespace around it removed, errors naming the file and
// never its content.
func secret(key, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	tok, err := creds.ReadToken(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	return tok, nil
}

// redisTLS is the client TLS of ledger.redis.tls, its files read and
// checked with creds, as the listeners' are.
func redisTLS(c config.RedisTLS) (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := creds.ReadFile(c.CAFile, creds.MaxPEMSize)
		if err == nil {
			t.RootCAs, err = creds.CertPool(pem)
		}
		if err != nil {
			return nil, fmt.Errorf("ledger.redis.tls.ca_file: %w", err)
		}
	}
	if c.CertFile != "" {
		cert, err := creds.ReadFile(c.CertFile, creds.MaxPEMSize)
		if err != nil {
			return nil, fmt.Errorf("ledger.redis.tls.cert_file: %w", err)
		}
		key, err := creds.ReadFile(c.KeyFile, creds.MaxPEMSize)
		if err != nil {
			return nil, fmt.Errorf("ledger.redis.tls.key_file: %w", err)
		}
		pair, err := creds.KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("ledger.redis.tls.cert_file: %w", err)
		}
		t.Certificates = []tls.Certificate{pair}
	}
	return t, nil
}

// run keeps the shared ledger and the shares going until ctx ends.
func (s *shared) run(ctx context.Context, reg *bulkhead.Registry, local *permit.Memory) error {
	var g errgroup.Group
	g.Go(func() error {
		// The shares follow the limits and the replica count.
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			s.syncShares(reg)
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
	g.Go(func() error {
		return s.ledger.Run(ctx, reg.Keys, func(ctx context.Context) error { return s.handover(ctx, reg, local) })
	})
	err := g.Wait()
	s.client.Close()
	return err
}

// syncShares sizes each bulkhead's share (redisledger.Ledger.Share), with
// its reserves; a bulkhead whose share cannot hold a best_effort permit
// gets none (its Checks are rejected while Redis does not answer).
func (s *shared) syncShares(reg *bulkhead.Registry) {
	want := map[string]bulkhead.Settings{}
	for _, snap := range reg.Snapshots() {
		if st := s.ledger.Share(snap.Name, snap.Settings); st.Validate() == nil {
			want[snap.Name] = st
		}
	}
	if _, err := s.shares.Apply(want); err != nil {
		s.log.Warn("local shares not resized", "err", err)
	}
}

// minHandoverLease is the shortest lease a permit admitted alone is handed
// over with: one whose local lease is about to end still reaches Redis.
const minHandoverLease = time.Second

// handover moves the permits this replica admitted while Redis did not
// answer into Redis, counted there past the limit if need be (their
// requests run), before strict admission resumes. No permit is admitted
// alone meanwhile (redisledger.Ledger.AdmitAlone): a slot that a permit
// handed over frees in the local share goes to no one, and passes repeat
// until one finds nothing left. Each permit keeps the time left on its
// lease: the heartbeat TTL would let Redis reclaim a long lease (heartbeats
// off, or a silent node) while its request runs.
func (s *shared) handover(ctx context.Context, reg *bulkhead.Registry, local *permit.Memory) error {
	moved := 0
	for {
		n, err := s.handoverPass(ctx, reg, local)
		moved += n
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	if moved > 0 {
		s.log.Info("permits admitted without redis handed over to it", "permits", moved)
	}
	return nil
}

// handoverPass hands over the local permits of each bulkhead of reg and
// returns how many it found.
func (s *shared) handoverPass(ctx context.Context, reg *bulkhead.Registry, local *permit.Memory) (int, error) {
	found := 0
	for _, name := range reg.Keys() {
		leases, _ := local.Holders(name, math.MaxInt32)
		for _, lease := range leases {
			if ctx.Err() != nil {
				return found, ctx.Err()
			}
			ttl := max(time.Until(lease.Expires), minHandoverLease)
			if _, res := s.ledger.Renew(name, lease.Token, ttl, lease.Node, true); res == redisledger.RenewFailed {
				return found, errors.New("redis did not answer during the hand-over")
			}
			if _, res := local.Release(lease.Token, permit.Handover); res != permit.Released {
				// Its request ended after the look (its end entry
				// released it here): end what Redis now holds.
				s.ledger.Release(name, lease.Token, permit.Handover)
			}
			found++
		}
	}
	return found, nil
}
