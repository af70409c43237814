package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
)

// Defaults of the ledger settings.
const (
	DefaultRedisPrefix      = "bulkhead:"
	DefaultRedisTimeout     = 50 * time.Millisecond
	DefaultRedisDialTimeout = time.Second
	maxRedisTimeout         = 10 * time.Second
)

// Ledger configures where permits are kept.
type Ledger struct {
	Backend LedgerBackend
	// OnUnavailable is what a replica does while Redis does not answer,
	// beyond what its capacity lease still covers (Backend Redis only).
	OnUnavailable admission.UnavailablePolicy
	Redis         Redis
}

// Redis configures the shared ledger's connection.
type Redis struct {
	// Address is one server's host:port; exclusive with Sentinel.
	Address  string
	Sentinel Sentinel
	Username string
	// PasswordFile holds the password (never the config itself).
	PasswordFile string
	DB           int
	TLS          RedisTLS
	// Cluster connects to a Redis Cluster through Address (a cluster-mode
	// configuration endpoint, or any one node).
	Cluster bool
	// CapacityLeases makes each replica admit locally from capacity it
	// leases from Redis (redisledger.Capacity); on by default. Only
	// Backend LedgerRedis reads it.
	CapacityLeases bool
	// Prefix starts every key and channel; it must not contain '{'.
	Prefix      string
	Timeout     time.Duration
	DialTimeout time.Duration
}

// Sentinel names a master watched by Redis Sentinel.
type Sentinel struct {
	Master       string
	Addresses    []string
	PasswordFile string
}

// RedisTLS configures TLS to Redis; CAFile "" uses the system roots.
type RedisTLS struct {
	Enabled                   bool
	CAFile, CertFile, KeyFile string
	ServerName                string
}

// LedgerBackend selects the ledger.
type LedgerBackend uint8

// The backends.
const (
	LedgerMemory LedgerBackend = iota // in this process: one replica only
	LedgerRedis                       // shared by every replica
)

var backendNames = [...]string{"memory", "redis"}

func (b LedgerBackend) String() string {
	if int(b) < len(backendNames) {
		return backendNames[b]
	}
	return fmt.Sprintf("backend(%d)", uint8(b))
}

// ParseLedgerBackend maps "memory" or "redis" to its backend.
func ParseLedgerBackend(s string) (LedgerBackend, error) {
	for i, n := range backendNames {
		if s == n {
			return LedgerBackend(i), nil
		}
	}
	return LedgerMemory, fmt.Errorf("%w: ledger backend %q (want memory or redis)", ErrInvalid, s)
}

// ledger checks the ledger section.
func (d *decoder) ledger(c *Config) {
	l := &c.Ledger
	d.resolveLocalShare(c)
	if l.Backend != LedgerRedis {
		// On by default, and without effect on the in-memory ledger; set
		// true by hand, it is a mistake.
		d.rule(keyCapacityLeases, l.Redis.CapacityLeases, !l.Redis.CapacityLeases || !d.explicit[keyCapacityLeases],
			"must be false unless ledger.backend is redis (capacity is leased from the shared ledger)")
		return
	}
	// The shared ledger enforces every bulkhead with one FIFO queue per
	// class: a dry run or CoDel would be silently enforced as FIFO.
	for _, name := range slices.Sorted(maps.Keys(c.Bulkheads)) {
		st := c.Bulkheads[name].Settings
		d.rule("bulkheads."+name+".enforce", !st.DryRun, !st.DryRun,
			"must be true with ledger.backend redis (a dry run is not available on the shared ledger)")
		d.rule("bulkheads."+name+".queue", st.Queue.String(), st.Queue != bulkhead.CoDel,
			"must be fifo with ledger.backend redis (the shared ledger's queues are FIFO)")
	}
	r := &l.Redis
	sentinel := r.Sentinel.Master != "" || len(r.Sentinel.Addresses) > 0
	switch {
	case r.Address == "" && !sentinel:
		d.rule("ledger.redis.address", r.Address, false,
			"must be set (host:port) when ledger.backend is redis, unless ledger.redis.sentinel is")
	case r.Address != "" && sentinel:
		d.rule("ledger.redis.address", r.Address, false, "must be empty when ledger.redis.sentinel is set (one or the other)")
	case r.Address != "":
		d.address("ledger.redis.address", r.Address)
	}
	if sentinel && r.Cluster {
		d.rule("ledger.redis.cluster", r.Cluster, false, "must be false with ledger.redis.sentinel (a cluster fails over by itself)")
	}
	if sentinel {
		d.rule("ledger.redis.sentinel.master", r.Sentinel.Master, r.Sentinel.Master != "",
			"must name the master when ledger.redis.sentinel.addresses is set")
		d.rule("ledger.redis.sentinel.addresses", r.Sentinel.Addresses, len(r.Sentinel.Addresses) > 0,
			"must list at least one Sentinel (host:port) when ledger.redis.sentinel.master is set")
		for i, a := range r.Sentinel.Addresses {
			d.address(fmt.Sprintf("ledger.redis.sentinel.addresses[%d]", i), a)
		}
	}
	d.rule("ledger.redis.db", r.DB, r.DB >= 0 && r.DB <= 15, "must be in 0..15")
	if r.Cluster && r.DB != 0 {
		d.rule("ledger.redis.db", r.DB, false, "must be 0 with ledger.redis.cluster (a cluster has one database)")
	}
	d.rule("ledger.redis.key_prefix", r.Prefix, !strings.ContainsAny(r.Prefix, "{}\n"),
		"must not contain '{', '}' or a newline (a bulkhead's keys share the hash tag {name})")
	d.rule("ledger.redis.timeout", r.Timeout, r.Timeout > 0 && r.Timeout <= maxRedisTimeout,
		"must be positive and at most "+maxRedisTimeout.String()+" (a Check waits for it)")
	d.rule("ledger.redis.dial_timeout", r.DialTimeout, r.DialTimeout > 0, "must be positive")
	if !r.TLS.Enabled && (r.TLS.CAFile != "" || r.TLS.CertFile != "" || r.TLS.KeyFile != "") {
		d.rule("ledger.redis.tls.enabled", r.TLS.Enabled, false, "must be true when ledger.redis.tls files are set")
	}
	d.rule("ledger.redis.tls.key_file", r.TLS.KeyFile, (r.TLS.CertFile == "") == (r.TLS.KeyFile == ""),
		"must be set together with ledger.redis.tls.cert_file")
	if d.checkFiles {
		// The daemon reads these with creds, as it reads the admin token and
		// the listeners' TLS files.
		for _, f := range [...][2]string{{"ledger.redis.password_file", r.PasswordFile},
			{"ledger.redis.sentinel.password_file", r.Sentinel.PasswordFile}} {
			if data := d.file(f[0], f[1], creds.MaxTokenSize); data != nil {
				if reason := creds.TokenProblem(strings.TrimSpace(string(data))); reason != "" {
					d.ps.add(f[0], "the password it holds "+reason, d.got(f[0], f[1]))
				}
			}
		}
		d.pemFiles("ledger.redis.tls.cert_file", r.TLS.CertFile, "ledger.redis.tls.key_file", r.TLS.KeyFile,
			"ledger.redis.tls.ca_file", r.TLS.CAFile)
	}
}
