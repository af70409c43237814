package config

import (
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

func TestRestartOnly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(c *Config)
		want   []string
	}{
		{"nothing", func(*Config) {}, nil},
		{"grpc address", func(c *Config) { c.Listen.GRPC = "127.0.0.1:7001" }, []string{"listen.grpc"}},
		{"connection age", func(c *Config) { c.Listen.GRPCMaxConnectionAge = time.Minute },
			[]string{"listen.grpc_max_connection_age"}},
		{"grpc tls", func(c *Config) { c.Listen.GRPCTLS.ClientCAFile = "ca.pem" }, []string{"listen.grpc_tls.client_ca_file"}},
		{"log", func(c *Config) { c.Log = Log{Level: slog.LevelDebug, Format: LogJSON} }, []string{"log.level", "log.format"}},
		{"leases read at start", func(c *Config) {
			c.Leases.MaxPermits, c.Leases.HeartbeatTTL, c.Leases.SweepInterval = 7, 0, time.Second
		}, []string{"leases.sweep_interval", "leases.heartbeat_ttl", "leases.max_permits"}},
		{"admin", func(c *Config) { c.Admin.TokenFile, c.Admin.TLS.CertFile = "/t", "/c" },
			[]string{"admin.token_file", "admin.tls.cert_file"}},
		{"in documented order", func(c *Config) { c.Admin.TLS.KeyFile, c.Listen.HTTP = "/k", ":0" },
			[]string{"listen.http", "admin.tls.key_file"}},
		{"reloadable authz", func(c *Config) {
			c.Authz = authz.Settings{PriorityHeader: "x-p", DefaultPriority: bulkhead.Critical, Unmatched: authz.Allow,
				DenyStatus: 429, DeadlineMargin: 0, RetryAfter: time.Minute, TenantHeader: "x-t",
				TrustedPrioritySources: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
		}, nil},
		{"reloadable leases and limits", func(c *Config) {
			c.Leases.DefaultTTL, c.Leases.MaxRouteTTL = time.Second, time.Second
			c.Limits = Limits{MaxBulkheads: 1, MaxTenants: 1}
		}, nil},
		{"bulkheads", func(c *Config) {
			c.Bulkheads = map[string]Bulkhead{"b": {Settings: bulkhead.Settings{MaxConcurrent: 1}}}
		}, nil},
		{"admin token from env", func(c *Config) { c.Admin.Token = "secret" }, nil},
		{"source", func(c *Config) { c.Source = "other.yaml" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			prev, next := defaults(), defaults()
			tt.change(next)
			if got := RestartOnly(prev, next); !slices.Equal(got, tt.want) {
				t.Errorf("RestartOnly = %q, want %q", got, tt.want)
			}
			if got := RestartOnly(next, prev); !slices.Equal(got, tt.want) {
				t.Errorf("RestartOnly reversed = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestRestartOnlyKeys pins the set of settings read only at start.
func TestRestartOnlyKeys(t *testing.T) {
	t.Parallel()
	var got []string
	for _, s := range scalars {
		if s.restart {
			got = append(got, s.key)
		}
	}
	want := []string{
		"listen.grpc", "listen.http", "listen.admin", "listen.grpc_max_connection_age",
		"listen.grpc_max_connection_age_grace", "listen.grpc_max_recv_bytes", "listen.grpc_max_concurrent_streams",
		"listen.grpc_tls.cert_file", "listen.grpc_tls.key_file", "listen.grpc_tls.client_ca_file",
		"log.level", "log.format",
		"leases.sweep_interval", "leases.heartbeat_interval", "leases.heartbeat_ttl", "leases.recovery_window", "leases.max_permits",
		"ledger.backend", "ledger.on_unavailable", "ledger.local_share_for", "ledger.redis.address", "ledger.redis.sentinel.master",
		"ledger.redis.sentinel.addresses", "ledger.redis.sentinel.password_file", "ledger.redis.username",
		"ledger.redis.password_file", "ledger.redis.cluster", "ledger.redis.db", "ledger.redis.capacity_leases", "ledger.redis.tls.enabled", "ledger.redis.tls.ca_file",
		"ledger.redis.tls.cert_file", "ledger.redis.tls.key_file", "ledger.redis.tls.server_name",
		"ledger.redis.key_prefix", "ledger.redis.timeout", "ledger.redis.dial_timeout",
		"shares.ttl", "shares.max_request_duration", "shares.interval",
		"admin.token_file", "admin.tls.cert_file", "admin.tls.key_file", "admin.tls.client_ca_file",
	}
	if !slices.Equal(got, want) {
		t.Errorf("restart-only settings = %q, want %q", got, want)
	}
}

// TestScalarsBindDistinctFields: each scalar decodes into its own field, so
// that a change to one is seen by RestartOnly as a change to that key only.
func TestScalarsBindDistinctFields(t *testing.T) {
	t.Parallel()
	base := defaults()
	for _, s := range scalars {
		if s.key == keyLocalShareFor {
			continue // deprecated: accepted with a warning, binds no field
		}
		c := defaults()
		d := &decoder{}
		s.field.set(d, c, s.key, sampleValue(s.def))
		if len(d.ps.list) != 0 {
			t.Fatalf("%s: sample value refused: %v", s.key, d.ps.list)
		}
		for _, o := range scalars {
			if o.key == keyLocalShareFor {
				continue
			}
			if differs := o.field.differs(base, c); differs != (o.key == s.key) {
				t.Errorf("setting %s: field of %s differs = %v", s.key, o.key, differs)
			}
		}
	}
}

// sampleValue returns a valid raw value other than def, of def's kind.
func sampleValue(def any) any {
	switch def := def.(type) {
	case int:
		return def + 1
	case bool:
		return !def
	case []any:
		return []any{"10.0.0.0/8"}
	case string:
		if _, err := time.ParseDuration(def); err == nil {
			return "1h2m3s"
		}
		for _, pair := range [][2]string{{"info", "debug"}, {"text", "json"}, {"normal", "critical"}, {"deny", "allow"}, {"memory", "redis"}, {"fail_closed", "fail_open"}} {
			if def == pair[0] {
				return pair[1]
			}
		}
		return def + "-other"
	}
	panic("no sample for a default of type " + reflect.TypeOf(def).String())
}
