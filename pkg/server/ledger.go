package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisledger"
)

// shared is the runner's part for ledger.backend: redis: the Redis client,
// the shared ledger, and the same under its unavailable policy.
type shared struct {
	client   redis.UniversalClient
	ledger   *redisledger.Ledger
	fallback *redisledger.Fallback
	log      *slog.Logger
	// overrides carries admin overrides to the other replicas.
	overrides *overrideSync
	// breakers makes the circuit breakers mesh-wide across the replicas,
	// sizing the suggestions.
	breakers *breakerSync
	sizing   *sizingShare
	replica  string // this replica's id in Redis
}

// newShared connects nothing yet: the ledger's Run does.
func newShared(cfg *config.Config, hb permit.Heartbeat, known func(string) bool, log *slog.Logger, obs permit.Observer,
	rec redisledger.Recorder) (*shared, error) {
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
	if cfg.Ledger.OnUnavailable == admission.LocalShare {
		localFor = cfg.Ledger.LocalShareFor
	}
	l := redisledger.New(client, redisledger.Config{
		LocalShareFor: localFor,
		Prefix:        cfg.Ledger.Redis.Prefix,
		Replica:       replica,
		Timeout:       cfg.Ledger.Redis.Timeout,
		Recovery:      cfg.Leases.RecoveryWindow,
		Heartbeat:     hb,
		Known:         known,
	}, obs, rec, log)
	return &shared{client: client, ledger: l, log: log, replica: replica}, nil
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
func (s *shared) run(ctx context.Context, reg *bulkhead.Registry) error {
	err := s.fallback.Run(ctx, reg)
	s.client.Close()
	return err
}
