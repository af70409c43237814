package config

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
)

// Config is the daemon's whole configuration. See the package doc for its
// sources; values are immutable once returned.
type Config struct {
	Listen Listen
	Log    Log
	// Authz is the authz section: the Check policy's own settings, as the
	// policy takes them (its defaults are authz's).
	Authz  authz.Settings
	Leases Leases
	Limits Limits
	Admin  Admin
	Ledger Ledger
	Shares Shares
	// Bulkheads maps each bulkhead name to its settings. It may be empty:
	// then every request goes through Authz.Unmatched.
	Bulkheads map[string]Bulkhead
	// Source names where the YAML came from: the file path given to Load,
	// the name given to Parse, or "" when Load read no file.
	Source string
	// Warnings are about settings accepted but deprecated, one line each
	// in the form of an *InvalidError's ("SOURCE: FIELD: reason (got
	// VALUE)"): the daemon logs them at load and reload, --check-config
	// prints them. nil when there are none.
	Warnings []string
}

// Listen holds the listen addresses, host:port; port 0 picks a free port.
// The three differ unless their port is 0.
type Listen struct {
	GRPC string // ext_authz, access-log service, gRPC health
	HTTP string // /metrics, /healthz, /readyz
	// Admin serves the admin API, gRPC (h2c) and JSON over HTTP on one
	// listener. Unless it is a loopback address, Admin.Secured holds.
	Admin string
	// GRPCMaxConnectionAge (advanced; 0 = off, else at least 1s) makes the
	// gRPC listener send GOAWAY to each connection this long after it
	// opened; GRPCMaxConnectionAgeGrace later (positive) the connection is
	// closed, ending the access-log streams on it. Envoy reconnects. Use it
	// to rebalance connections behind a load balancer, or to exercise
	// stream resets.
	GRPCMaxConnectionAge      time.Duration
	GRPCMaxConnectionAgeGrace time.Duration
	// GRPCTLS, when its CertFile is set, serves the gRPC listener over TLS,
	// and over mutual TLS when its ClientCAFile is set too. The server
	// re-reads the files when they change: a rotated certificate (or CA
	// bundle) applies to new connections without a restart.
	GRPCTLS TLSFiles
	// GRPCMaxRecvBytes bounds one message received on the gRPC listener (a
	// CheckRequest, or one batch of access-log entries); a larger message
	// fails its RPC. In MinGRPCMaxRecvBytes..MaxGRPCMaxRecvBytes.
	GRPCMaxRecvBytes int
	// GRPCMaxConcurrentStreams bounds the RPCs in flight on one gRPC
	// connection. A Check waiting in a queue is one of them, so keep it
	// well above the Checks one Envoy may have waiting at once (Envoy opens
	// more connections when it reaches the bound).
	// In MinGRPCMaxConcurrentStreams..MaxGRPCMaxConcurrentStreams.
	GRPCMaxConcurrentStreams int
}

// Log configures the daemon's slog handler.
type Log struct {
	Level  slog.Level // one of debug, info, warn, error
	Format LogFormat
}

// Leases configures permit leases.
type Leases struct {
	DefaultTTL    time.Duration // lease_ttl of bulkheads that set none
	SweepInterval time.Duration // how often expired leases are reclaimed
	// HeartbeatInterval is Envoy's access_log_flush_interval: how often it
	// logs each request in flight. 0 turns heartbeat leases off: permits
	// then last their bulkhead's lease_ttl.
	HeartbeatInterval time.Duration
	// HeartbeatTTL is the lease of every permit while heartbeats are on,
	// renewed by each periodic entry; at least twice HeartbeatInterval.
	HeartbeatTTL time.Duration
	// RecoveryWindow is how long a starting daemon pauses admissions while
	// the periodic entries of requests already running are adopted; 0 admits
	// at once. Used only while heartbeats are on.
	RecoveryWindow time.Duration
	// MaxRouteTTL caps the lease a route may ask for with
	// context_extensions lease_ttl; positive.
	MaxRouteTTL time.Duration
	// MaxPermits caps the permits held at once across every bulkhead (the
	// ledger's leases); a Check beyond it cannot decide (gRPC
	// RESOURCE_EXHAUSTED, Envoy's failure mode applies). 1..MaxPermitsCeiling.
	MaxPermits int
}

// Kinds is what each bulkhead counts (requests or connections), by name,
// for the metrics.
func (c *Config) Kinds() map[string]string {
	kinds := make(map[string]string, len(c.Bulkheads))
	for name, b := range c.Bulkheads {
		kinds[name] = string(b.Kind())
	}
	return kinds
}

// Heartbeat is the lease contract these settings make with Envoy's
// periodic access log (off when HeartbeatInterval is 0).
func (l Leases) Heartbeat() permit.Heartbeat {
	return permit.Heartbeat{Interval: l.HeartbeatInterval, TTL: l.HeartbeatTTL}
}

// Limits caps what the configuration (and later the admin API) may create.
type Limits struct {
	MaxBulkheads int
	// MaxTenants caps the live tenant sub-bulkheads of each bulkhead with a
	// tenant template; idle ones are evicted beyond it.
	MaxTenants int
}

// Bulkhead is one configured bulkhead.
type Bulkhead struct {
	// Settings.DryRun is the file's enforce: false (default true).
	Settings bulkhead.Settings
	// LeaseTTL is how long a permit may be held before it is reclaimed;
	// Leases.DefaultTTL when the file sets none.
	LeaseTTL time.Duration
	// Tenant, when not nil, is the template of the bulkhead's per-tenant
	// sub-bulkheads: one per value of Authz.TenantHeader, each admitting
	// within the bulkhead's own limit as well as its own. It is set only when
	// Authz.TenantHeader is. Its MaxConcurrent is in 1..Settings.MaxConcurrent,
	// its MaxWait defaults to the bulkhead's, and it has no reserves (the
	// bulkhead's reserves apply across tenants).
	Tenant *bulkhead.Settings
	// Breaker, when not nil, is the bulkhead's mesh-wide circuit breaker
	// (circuit_breaker); nil: the bulkhead has none.
	Breaker *breaker.Settings
	// Connections, when not nil, makes the bulkhead count TCP connections
	// (Envoy's network ext_authz filter) instead of requests.
	Connections *Connections
	// Shares is how the bulkhead admits: strict permits (the default), or
	// shares its Envoys' circuit breakers enforce (package shares).
	Shares shares.Policy
}

// LogFormat selects the slog handler. The zero value is LogText.
type LogFormat uint8

// The log formats.
const (
	LogText LogFormat = iota // slog.TextHandler
	LogJSON                  // slog.JSONHandler
)

var logFormatNames = [...]string{"text", "json"}

// String returns the format's configuration name.
func (f LogFormat) String() string {
	if int(f) < len(logFormatNames) {
		return logFormatNames[f]
	}
	return fmt.Sprintf("log_format(%d)", uint8(f))
}

// ParseLogFormat maps "text" or "json" to its format.
func ParseLogFormat(s string) (LogFormat, error) {
	for i, n := range logFormatNames {
		if s == n {
			return LogFormat(i), nil
		}
	}
	return LogText, fmt.Errorf("%w: log format %q (want text or json)", ErrInvalid, s)
}

var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

// ParseLogLevel maps "debug", "info", "warn" or "error" to its slog level.
func ParseLogLevel(s string) (slog.Level, error) {
	if l, ok := logLevels[s]; ok {
		return l, nil
	}
	return slog.LevelInfo, fmt.Errorf("%w: log level %q (want debug, info, warn or error)", ErrInvalid, s)
}
