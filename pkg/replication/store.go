package replication

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
)

// Store is the Redis the replicas share, as this replica sees it.
type Store struct {
	Client redis.UniversalClient
	// Prefix starts every key (ledger.redis.key_prefix).
	Prefix string
	// Replica is this replica's id in Redis.
	Replica string
	// Where says which Redis, for the logs: its address, or the sentinel
	// master and the sentinels' addresses.
	Where string
}

// NewStore builds the client of c and names this replica. It connects
// nothing: the client's first command does. Commands are not retried by
// the client (MaxRetries -1); the cluster client still retries one after a
// broken connection (up to its MaxRedirects) although the script may have
// run, and the ledger's scripts are idempotent per token for that.
func NewStore(c config.Redis) (Store, error) {
	o := &redis.UniversalOptions{
		DB:                    c.DB,
		Username:              c.Username,
		DialTimeout:           c.DialTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	}
	st := Store{Prefix: c.Prefix, Where: c.Address}
	if c.Address != "" {
		o.Addrs, o.IsClusterMode = []string{c.Address}, c.Cluster
	} else {
		o.Addrs, o.MasterName = c.Sentinel.Addresses, c.Sentinel.Master
		st.Where = "sentinel " + c.Sentinel.Master + " at " + strings.Join(c.Sentinel.Addresses, ",")
	}
	var err error
	if o.Password, err = secret("ledger.redis.password_file", c.PasswordFile); err != nil {
		return Store{}, err
	}
	if o.SentinelPassword, err = secret("ledger.redis.sentinel.password_file", c.Sentinel.PasswordFile); err != nil {
		return Store{}, err
	}
	if c.TLS.Enabled {
		if o.TLSConfig, err = redisTLS(c.TLS); err != nil {
			return Store{}, err
		}
	}
	if st.Replica, err = replicaID(); err != nil {
		return Store{}, err
	}
	st.Client = redis.NewUniversalClient(o)
	return st, nil
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
