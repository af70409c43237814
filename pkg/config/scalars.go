package config

import (
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
)

// Defaults and bounds of the settings outside bulkheads that this package
// owns. The defaults of the Check policy are authz's (authz.DefaultPolicy)
// and those of the permit ledger are permit's: scalars takes them from there.
const (
	DefaultListenGRPC      = "127.0.0.1:9001"
	DefaultListenHTTP      = "127.0.0.1:9090"
	DefaultListenAdmin     = "127.0.0.1:9091"
	DefaultMaxConnAgeGrace = 10 * time.Second
	minMaxConnAge          = time.Second
	DefaultMaxBulkheads    = 1000
	MaxBulkheadsCeiling    = 100000 // limits.max_bulkheads may not exceed it
	DefaultMaxTenants      = 1000
	MaxTenantsCeiling      = 1000000 // limits.max_tenants may not exceed it
	maxDeadlineMarginLimit = time.Second
	minHeartbeatInterval   = 100 * time.Millisecond

	DefaultGRPCMaxRecvBytes         = 4 << 20
	MinGRPCMaxRecvBytes             = 64 << 10 // a CheckRequest carries every request header
	MaxGRPCMaxRecvBytes             = 64 << 20
	DefaultGRPCMaxConcurrentStreams = 10000
	MinGRPCMaxConcurrentStreams     = 100 // waiting Checks are streams: a low bound fails them
	MaxGRPCMaxConcurrentStreams     = 1 << 20
	MaxPermitsCeiling               = 100_000_000 // leases.max_permits may not exceed it
)

// scalar is one setting outside bulkheads: its dotted key (also its env
// name, BULKHEAD_ + upper-cased key with "_" for "."), its default in the form
// YAML gives it, the flag that overrides it, whether it takes effect only at
// start, and the Config field it is decoded into.
type scalar struct {
	key     string
	def     any
	flag    string
	restart bool
	field   field
}

// Values of scalar.restart.
const (
	reloadable  = false // a reload applies it
	restartOnly = true  // read at start; a reload reports a change (RestartOnly) and ignores it
)

// scalars lists every setting outside bulkheads, in the order documented.
// Read-only.
var scalars = []scalar{
	{"listen.grpc", DefaultListenGRPC, FlagListenGRPC, restartOnly, text(func(c *Config) *string { return &c.Listen.GRPC })},
	{"listen.http", DefaultListenHTTP, FlagListenHTTP, restartOnly, text(func(c *Config) *string { return &c.Listen.HTTP })},
	{"listen.admin", DefaultListenAdmin, FlagListenAdmin, restartOnly, text(func(c *Config) *string { return &c.Listen.Admin })},
	{"listen.grpc_max_connection_age", "0s", "", restartOnly,
		duration(func(c *Config) *time.Duration { return &c.Listen.GRPCMaxConnectionAge })},
	{"listen.grpc_max_connection_age_grace", DefaultMaxConnAgeGrace.String(), "", restartOnly,
		duration(func(c *Config) *time.Duration { return &c.Listen.GRPCMaxConnectionAgeGrace })},
	{"listen.grpc_max_recv_bytes", DefaultGRPCMaxRecvBytes, "", restartOnly,
		integer(func(c *Config) *int { return &c.Listen.GRPCMaxRecvBytes })},
	{"listen.grpc_max_concurrent_streams", DefaultGRPCMaxConcurrentStreams, "", restartOnly,
		integer(func(c *Config) *int { return &c.Listen.GRPCMaxConcurrentStreams })},
	{"listen.grpc_tls.cert_file", "", "", restartOnly, text(func(c *Config) *string { return &c.Listen.GRPCTLS.CertFile })},
	{"listen.grpc_tls.key_file", "", "", restartOnly, text(func(c *Config) *string { return &c.Listen.GRPCTLS.KeyFile })},
	{"listen.grpc_tls.client_ca_file", "", "", restartOnly, text(func(c *Config) *string { return &c.Listen.GRPCTLS.ClientCAFile })},

	{"log.level", "info", FlagLogLevel, restartOnly,
		enum(func(c *Config) *slog.Level { return &c.Log.Level }, ParseLogLevel, "must be debug, info, warn or error")},
	{"log.format", LogText.String(), FlagLogFormat, restartOnly,
		enum(func(c *Config) *LogFormat { return &c.Log.Format }, ParseLogFormat, "must be text or json")},

	{"authz.priority_header", authz.DefaultPriorityHeader, "", reloadable, text(func(c *Config) *string { return &c.Authz.PriorityHeader })},
	{"authz.default_priority", authz.DefaultPriority.String(), "", reloadable,
		enum(func(c *Config) *bulkhead.Priority { return &c.Authz.DefaultPriority }, bulkhead.ParsePriority,
			"must be critical, normal or best_effort")},
	{"authz.unknown_bulkhead", authz.DefaultUnmatched.String(), "", reloadable,
		enum(func(c *Config) *authz.UnmatchedPolicy { return &c.Authz.Unmatched }, authz.ParseUnmatchedPolicy,
			"must be deny, allow or default")},
	{"authz.default_bulkhead", "", "", reloadable, text(func(c *Config) *string { return &c.Authz.DefaultBulkhead })},
	{"authz.deny_status", authz.DefaultDenyStatus, "", reloadable, integer(func(c *Config) *int { return &c.Authz.DenyStatus })},
	{"authz.deadline_margin", authz.DefaultDeadlineMargin.String(), "", reloadable,
		duration(func(c *Config) *time.Duration { return &c.Authz.DeadlineMargin })},
	{"authz.retry_after", authz.DefaultRetryAfter.String(), "", reloadable,
		duration(func(c *Config) *time.Duration { return &c.Authz.RetryAfter })},
	{"authz.tenant_header", "", "", reloadable, text(func(c *Config) *string { return &c.Authz.TenantHeader })},
	{"authz.trusted_priority_sources", []any{}, "", reloadable,
		fieldOf(func(c *Config) *[]netip.Prefix { return &c.Authz.TrustedPrioritySources }, (*decoder).prefixes)},

	{"leases.default_ttl", authz.DefaultLeaseTTL.String(), "", reloadable,
		duration(func(c *Config) *time.Duration { return &c.Leases.DefaultTTL })},
	{"leases.sweep_interval", permit.DefaultSweepInterval.String(), "", restartOnly,
		duration(func(c *Config) *time.Duration { return &c.Leases.SweepInterval })},
	{"leases.heartbeat_interval", permit.DefaultHeartbeatInterval.String(), "", restartOnly,
		duration(func(c *Config) *time.Duration { return &c.Leases.HeartbeatInterval })},
	{"leases.heartbeat_ttl", permit.DefaultHeartbeatTTL.String(), "", restartOnly,
		duration(func(c *Config) *time.Duration { return &c.Leases.HeartbeatTTL })},
	{"leases.recovery_window", permit.DefaultRecoveryWindow.String(), "", restartOnly,
		duration(func(c *Config) *time.Duration { return &c.Leases.RecoveryWindow })},
	{"leases.max_route_ttl", authz.DefaultMaxRouteLeaseTTL.String(), "", reloadable,
		duration(func(c *Config) *time.Duration { return &c.Leases.MaxRouteTTL })},
	{"leases.max_permits", permit.DefaultMaxLeases, "", restartOnly, integer(func(c *Config) *int { return &c.Leases.MaxPermits })},

	{"limits.max_bulkheads", DefaultMaxBulkheads, "", reloadable, integer(func(c *Config) *int { return &c.Limits.MaxBulkheads })},
	{"limits.max_tenants", DefaultMaxTenants, "", reloadable, integer(func(c *Config) *int { return &c.Limits.MaxTenants })},

	{"ledger.backend", LedgerMemory.String(), "", restartOnly,
		enum(func(c *Config) *LedgerBackend { return &c.Ledger.Backend }, ParseLedgerBackend, "must be memory or redis")},
	{"ledger.on_unavailable", admission.FailClosed.String(), "", restartOnly, onUnavailable},
	// Deprecated: accepted with a warning, without effect (deprecated.go).
	{"ledger.local_share_for", "", "", restartOnly, localShareFor},
	{"ledger.redis.address", "", "", restartOnly, text(func(c *Config) *string { return &c.Ledger.Redis.Address })},
	{"ledger.redis.sentinel.master", "", "", restartOnly, text(func(c *Config) *string { return &c.Ledger.Redis.Sentinel.Master })},
	{"ledger.redis.sentinel.addresses", []any{}, "", restartOnly,
		fieldOf(func(c *Config) *[]string { return &c.Ledger.Redis.Sentinel.Addresses }, (*decoder).strs)},
	{"ledger.redis.sentinel.password_file", "", "", restartOnly,
		text(func(c *Config) *string { return &c.Ledger.Redis.Sentinel.PasswordFile })},
	{"ledger.redis.username", "", "", restartOnly, text(func(c *Config) *string { return &c.Ledger.Redis.Username })},
	{"ledger.redis.password_file", "", "", restartOnly, text(func(c *Config) *string { return &c.Ledger.Redis.PasswordFile })},
	{"ledger.redis.cluster", false, "", restartOnly, fieldOf(func(c *Config) *bool { return &c.Ledger.Redis.Cluster }, (*decoder).boolean)},
	{"ledger.redis.db", 0, "", restartOnly, integer(func(c *Config) *int { return &c.Ledger.Redis.DB })},
	{"ledger.redis.capacity_leases", true, "", restartOnly,
		fieldOf(func(c *Config) *bool { return &c.Ledger.Redis.CapacityLeases }, (*decoder).boolean)},
	{"ledger.redis.tls.enabled", false, "", restartOnly, fieldOf(func(c *Config) *bool { return &c.Ledger.Redis.TLS.Enabled }, (*decoder).boolean)},
	{"ledger.redis.tls.ca_file", "", "", restartOnly, text(func(c *Config) *string { return &c.Ledger.Redis.TLS.CAFile })},
	{"ledger.redis.tls.cert_file", "", "", restartOnly, text(func(c *Config) *string { return &c.Ledger.Redis.TLS.CertFile })},
	{"ledger.redis.tls.key_file", "", "", restartOnly, text(func(c *Config) *string { return &c.Ledger.Redis.TLS.KeyFile })},
	{"ledger.redis.tls.server_name", "", "", restartOnly, text(func(c *Config) *string { return &c.Ledger.Redis.TLS.ServerName })},
	{"ledger.redis.key_prefix", DefaultRedisPrefix, "", restartOnly, text(func(c *Config) *string { return &c.Ledger.Redis.Prefix })},
	{"ledger.redis.timeout", DefaultRedisTimeout.String(), "", restartOnly,
		duration(func(c *Config) *time.Duration { return &c.Ledger.Redis.Timeout })},
	{"ledger.redis.dial_timeout", DefaultRedisDialTimeout.String(), "", restartOnly,
		duration(func(c *Config) *time.Duration { return &c.Ledger.Redis.DialTimeout })},

	{"shares.ttl", shares.DefaultTTL.String(), "", restartOnly, duration(func(c *Config) *time.Duration { return &c.Shares.TTL })},
	{"shares.max_request_duration", shares.DefaultMaxRequest.String(), "", restartOnly,
		duration(func(c *Config) *time.Duration { return &c.Shares.MaxRequestDuration })},
	{"shares.interval", shares.DefaultInterval.String(), "", restartOnly,
		duration(func(c *Config) *time.Duration { return &c.Shares.Interval })},

	{"admin.token_file", "", "", restartOnly, text(func(c *Config) *string { return &c.Admin.TokenFile })},
	{"admin.tls.cert_file", "", "", restartOnly, text(func(c *Config) *string { return &c.Admin.TLS.CertFile })},
	{"admin.tls.key_file", "", "", restartOnly, text(func(c *Config) *string { return &c.Admin.TLS.KeyFile })},
	{"admin.tls.client_ca_file", "", "", restartOnly, text(func(c *Config) *string { return &c.Admin.TLS.ClientCAFile })},
}

// field is a Config field with the decoder of its raw values.
type field struct {
	// set decodes raw, the value of key, into c, recording any problem in d.
	set func(d *decoder, c *Config, key string, raw any)
	// differs reports whether the field differs between a and b.
	differs func(a, b *Config) bool
}

// fieldOf is the field that at points into, decoded by dec.
func fieldOf[T any](at func(*Config) *T, dec func(d *decoder, key string, raw any) T) field {
	return field{
		set:     func(d *decoder, c *Config, key string, raw any) { *at(c) = dec(d, key, raw) },
		differs: func(a, b *Config) bool { return !reflect.DeepEqual(*at(a), *at(b)) },
	}
}

func text(at func(*Config) *string) field            { return fieldOf(at, (*decoder).str) }
func integer(at func(*Config) *int) field            { return fieldOf(at, (*decoder).integer) }
func duration(at func(*Config) *time.Duration) field { return fieldOf(at, (*decoder).duration) }

// enum is a field whose values are the names parse accepts; reason is the
// problem with any other string. A value that is not a string gets the value
// parse gives "" (each parser's fallback) and the problem "must be a string".
func enum[T any](at func(*Config) *T, parse func(string) (T, error), reason string) field {
	return fieldOf(at, func(d *decoder, key string, v any) T {
		s, ok := d.strOK(key, v)
		t, err := parse(s)
		if ok {
			d.check(key, v, err == nil, reason)
		}
		return t
	})
}

// envName is the environment variable overriding key.
func envName(key string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// Keys returns the dotted keys of every setting outside bulkheads, in the
// documented order (the Helm chart's tests check its values schema against
// them).
func Keys() []string {
	keys := make([]string, len(scalars))
	for i, s := range scalars {
		keys[i] = s.key
	}
	return keys
}

// RestartOnly returns the dotted keys of the settings that take effect only
// at start (listen.*, log.*, leases.sweep_interval, leases.heartbeat_*,
// leases.recovery_window, leases.max_permits, ledger.*, admin.token_file and
// admin.tls.*) whose values differ
// between prev and next, in the documented order; nil when none does. A
// reload applies every other setting. The content of the TLS files is not a
// setting: the listeners re-read the files when they change.
func RestartOnly(prev, next *Config) []string {
	var keys []string
	for _, s := range scalars {
		if s.restart && s.field.differs(prev, next) {
			keys = append(keys, s.key)
		}
	}
	return keys
}
