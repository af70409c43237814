package config

import (
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

const testSource = "bulkhead.yaml"

// defaults is the Config of an empty document.
func defaults() *Config {
	return &Config{
		Listen: Listen{GRPC: "127.0.0.1:9001", HTTP: "127.0.0.1:9090", Admin: "127.0.0.1:9091",
			GRPCMaxConnectionAgeGrace: 10 * time.Second, GRPCMaxRecvBytes: 4 << 20, GRPCMaxConcurrentStreams: 10000},
		Log: Log{Level: slog.LevelInfo, Format: LogText},
		Authz: authz.Settings{
			PriorityHeader:  "x-bulkhead-priority",
			DefaultPriority: bulkhead.Normal,
			Unmatched:       authz.Deny,
			DenyStatus:      503,
			DeadlineMargin:  25 * time.Millisecond,
			RetryAfter:      time.Second,
		},
		Leases: Leases{DefaultTTL: time.Minute, SweepInterval: 500 * time.Millisecond,
			HeartbeatInterval: time.Second, HeartbeatTTL: 3 * time.Second, RecoveryWindow: 1500 * time.Millisecond,
			MaxRouteTTL: 10 * time.Minute, MaxPermits: 1_000_000},
		Limits:    Limits{MaxBulkheads: 1000, MaxTenants: 1000},
		Ledger:    Ledger{Redis: Redis{CapacityLeases: true, Prefix: "bulkhead:", Timeout: 50 * time.Millisecond, DialTimeout: time.Second}},
		Shares:    Shares{TTL: 3 * time.Second, MaxRequestDuration: 5 * time.Second, Interval: time.Second},
		Bulkheads: map[string]Bulkhead{},
		Source:    testSource,
	}
}

func TestParseValid(t *testing.T) {
	t.Parallel()
	name63 := strings.Repeat("a", 63)
	tests := []struct {
		name string
		yaml string
		want func(c *Config)
	}{
		{"empty input", "", func(*Config) {}},
		{"null document", "~\n", func(*Config) {}},
		{"empty sections", "listen:\nlog: {}\nbulkheads:\n", func(*Config) {}},
		{"null fields are unset", "authz: {default_bulkhead: , deny_status: }\n", func(*Config) {}},
		{
			"every scalar",
			`listen: {grpc: "[::1]:0", http: ":0", admin: "0.0.0.0:9191", grpc_max_connection_age: 5m, grpc_max_connection_age_grace: 30s,
  grpc_max_recv_bytes: 65536, grpc_max_concurrent_streams: 100,
  grpc_tls: {cert_file: /tls/grpc.crt, key_file: /tls/grpc.key, client_ca_file: /tls/envoy-ca.crt}}
log: {level: debug, format: json}
authz:
  priority_header: ""
  default_priority: best_effort
  unknown_bulkhead: default
  default_bulkhead: fallback
  deny_status: 429
  deadline_margin: 0
  retry_after: 2s
  tenant_header: x-tenant-id
  trusted_priority_sources: [127.0.0.0/8, "::1/128", 10.1.0.0/16]
leases: {default_ttl: 5m, sweep_interval: 1s, heartbeat_interval: 2s, heartbeat_ttl: 5s, recovery_window: 3s, max_route_ttl: 1h, max_permits: 100000000}
limits: {max_bulkheads: 1, max_tenants: 1000000}
admin:
  token_file: /run/secrets/admin-token
  tls: {cert_file: /tls/tls.crt, key_file: /tls/tls.key, client_ca_file: /tls/ca.crt}
bulkheads:
  fallback: {max_concurrent: 1}
`,
			func(c *Config) {
				c.Listen = Listen{GRPC: "[::1]:0", HTTP: ":0", Admin: "0.0.0.0:9191",
					GRPCMaxConnectionAge: 5 * time.Minute, GRPCMaxConnectionAgeGrace: 30 * time.Second,
					GRPCMaxRecvBytes: 65536, GRPCMaxConcurrentStreams: 100,
					GRPCTLS: TLSFiles{CertFile: "/tls/grpc.crt", KeyFile: "/tls/grpc.key", ClientCAFile: "/tls/envoy-ca.crt"}}
				c.Log = Log{Level: slog.LevelDebug, Format: LogJSON}
				c.Authz = authz.Settings{
					DefaultPriority: bulkhead.BestEffort, Unmatched: authz.UseDefault,
					DefaultBulkhead: "fallback", DenyStatus: 429, RetryAfter: 2 * time.Second,
					TenantHeader: "x-tenant-id",
					TrustedPrioritySources: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"),
						netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("10.1.0.0/16")},
				}
				c.Leases = Leases{DefaultTTL: 5 * time.Minute, SweepInterval: time.Second, HeartbeatInterval: 2 * time.Second,
					HeartbeatTTL: 5 * time.Second, RecoveryWindow: 3 * time.Second, MaxRouteTTL: time.Hour, MaxPermits: 100_000_000}
				c.Limits = Limits{MaxBulkheads: 1, MaxTenants: 1000000}
				c.Admin = Admin{TokenFile: "/run/secrets/admin-token",
					TLS: TLSFiles{CertFile: "/tls/tls.crt", KeyFile: "/tls/tls.key", ClientCAFile: "/tls/ca.crt"}}
				c.Bulkheads["fallback"] = Bulkhead{Settings: bulkhead.Settings{MaxConcurrent: 1}, LeaseTTL: 5 * time.Minute}
			},
		},
		{"same address with port 0", "listen: {grpc: 127.0.0.1:0, http: 127.0.0.1:0, admin: 127.0.0.1:0}\n", func(c *Config) {
			c.Listen.GRPC, c.Listen.HTTP, c.Listen.Admin = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		}},
		{"admin on ipv6 loopback", "listen: {admin: \"[::1]:9091\"}\n", func(c *Config) { c.Listen.Admin = "[::1]:9091" }},
		{"admin on localhost", "listen: {admin: localhost:0}\n", func(c *Config) { c.Listen.Admin = "localhost:0" }},
		{"admin on 127.0.0.2", "listen: {admin: 127.0.0.2:9091}\n", func(c *Config) { c.Listen.Admin = "127.0.0.2:9091" }},
		{"admin anywhere with mTLS", "listen: {admin: \":9091\"}\nadmin: {tls: {cert_file: c, key_file: k, client_ca_file: ca}}\n",
			func(c *Config) {
				c.Listen.Admin = ":9091"
				c.Admin.TLS = TLSFiles{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}
			}},
		{"admin anywhere with a token file", "listen: {admin: 10.0.0.1:9091}\nadmin: {token_file: tok}\n", func(c *Config) {
			c.Listen.Admin = "10.0.0.1:9091"
			c.Admin.TokenFile = "tok"
		}},
		{"TLS without client CA", "admin: {tls: {cert_file: c, key_file: k}}\n", func(c *Config) {
			c.Admin.TLS = TLSFiles{CertFile: "c", KeyFile: "k"}
		}},
		{"null admin sections", "admin: {token_file: , tls: }\n", func(*Config) {}},
		{"codel", "bulkheads: {a: {max_concurrent: 1, queue: codel}, b: {max_concurrent: 1, queue: codel, codel: {target: 20ms, interval: 1s}}, c: {max_concurrent: 1, queue: fifo}}\n",
			func(c *Config) {
				c.Bulkheads["a"] = Bulkhead{Settings: bulkhead.Settings{MaxConcurrent: 1, Queue: bulkhead.CoDel,
					CoDelTarget: bulkhead.DefaultCoDelTarget, CoDelInterval: bulkhead.DefaultCoDelInterval}, LeaseTTL: time.Minute}
				c.Bulkheads["b"] = Bulkhead{Settings: bulkhead.Settings{MaxConcurrent: 1, Queue: bulkhead.CoDel,
					CoDelTarget: 20 * time.Millisecond, CoDelInterval: time.Second}, LeaseTTL: time.Minute}
				c.Bulkheads["c"] = Bulkhead{Settings: bulkhead.Settings{MaxConcurrent: 1}, LeaseTTL: time.Minute}
			}},
		{"circuit breaker", "bulkheads: {a: {max_concurrent: 1, circuit_breaker: {}}, b: {max_concurrent: 1, circuit_breaker: {failure_ratio: 0.25, min_requests: 5, window: 2s, open_for: 1s, half_open_probes: 1, slow_call_duration: 300ms}}}\n",
			func(c *Config) {
				c.Bulkheads["a"] = Bulkhead{Settings: bulkhead.Settings{MaxConcurrent: 1}, LeaseTTL: time.Minute,
					Breaker: &breaker.Settings{FailureRatio: 0.5, MinRequests: 20, Window: 10 * time.Second, OpenFor: 5 * time.Second, HalfOpenProbes: 5}}
				c.Bulkheads["b"] = Bulkhead{Settings: bulkhead.Settings{MaxConcurrent: 1}, LeaseTTL: time.Minute,
					Breaker: &breaker.Settings{FailureRatio: 0.25, MinRequests: 5, Window: 2 * time.Second, OpenFor: time.Second,
						HalfOpenProbes: 1, SlowCallDuration: 300 * time.Millisecond}}
			}},
		{"dry run", "authz: {tenant_header: x-t}\nbulkheads: {c: {max_concurrent: 2, enforce: false, tenant: {max_concurrent: 1}}, d: {max_concurrent: 1, enforce: \"true\"}}\n",
			func(c *Config) {
				c.Authz.TenantHeader = "x-t"
				c.Bulkheads["c"] = Bulkhead{Settings: bulkhead.Settings{MaxConcurrent: 2, DryRun: true}, LeaseTTL: time.Minute,
					Tenant: &bulkhead.Settings{MaxConcurrent: 1, DryRun: true}}
				c.Bulkheads["d"] = Bulkhead{Settings: bulkhead.Settings{MaxConcurrent: 1}, LeaseTTL: time.Minute}
			}},
		{
			"tenant templates",
			`authz: {tenant_header: x-tenant-id}
bulkheads:
  catalog: {max_concurrent: 10, max_wait: 500ms, tenant: {max_concurrent: 3, max_queue: 5}}
  auth: {max_concurrent: 4, tenant: {max_concurrent: 4, max_queue: 0, max_wait: 0s}}
  orders: {max_concurrent: 2, max_wait: 1s, tenant: {max_concurrent: "1", max_wait: 2s}}
  plain: {max_concurrent: 2, tenant: }
`,
			func(c *Config) {
				c.Authz.TenantHeader = "x-tenant-id"
				c.Bulkheads["catalog"] = Bulkhead{
					Settings: bulkhead.Settings{MaxConcurrent: 10, MaxWait: 500 * time.Millisecond}, LeaseTTL: time.Minute,
					Tenant: &bulkhead.Settings{MaxConcurrent: 3, MaxQueue: 5, MaxWait: 500 * time.Millisecond},
				}
				c.Bulkheads["auth"] = Bulkhead{Settings: bulkhead.Settings{MaxConcurrent: 4}, LeaseTTL: time.Minute,
					Tenant: &bulkhead.Settings{MaxConcurrent: 4}}
				c.Bulkheads["orders"] = Bulkhead{Settings: bulkhead.Settings{MaxConcurrent: 2, MaxWait: time.Second}, LeaseTTL: time.Minute,
					Tenant: &bulkhead.Settings{MaxConcurrent: 1, MaxWait: 2 * time.Second}}
				c.Bulkheads["plain"] = Bulkhead{Settings: bulkhead.Settings{MaxConcurrent: 2}, LeaseTTL: time.Minute}
			},
		},
		{"allow policy", "authz: {unknown_bulkhead: allow}\n", func(c *Config) { c.Authz.Unmatched = authz.Allow }},
		{
			"bulkhead fields and lease_ttl",
			`bulkheads:
  catalog: {max_concurrent: 10, max_queue: 20, max_wait: 500ms, lease_ttl: 5s, reserve: {critical: 0.2, normal: 0.1}}
  lean: {max_concurrent: "3", max_wait: "0", max_queue: 0, reserve: {critical: 0, normal: }}
`,
			func(c *Config) {
				c.Bulkheads["catalog"] = Bulkhead{Settings: bulkhead.Settings{
					MaxConcurrent: 10, MaxQueue: 20, MaxWait: 500 * time.Millisecond,
					ReserveCritical: 0.2, ReserveNormal: 0.1,
				}, LeaseTTL: 5 * time.Second}
				c.Bulkheads["lean"] = Bulkhead{Settings: bulkhead.Settings{MaxConcurrent: 3}, LeaseTTL: time.Minute}
			},
		},
		{
			"dotted and edge names",
			"bulkheads:\n  api.v1-users_x: {max_concurrent: 1}\n  a: {max_concurrent: 1}\n  " + name63 + ": {max_concurrent: 1}\n  \"7\": {max_concurrent: 1}\n",
			func(c *Config) {
				for _, n := range []string{"api.v1-users_x", "a", name63, "7"} {
					c.Bulkheads[n] = Bulkhead{Settings: bulkhead.Settings{MaxConcurrent: 1}, LeaseTTL: time.Minute}
				}
			},
		},
		{"heartbeats off", "leases: {heartbeat_interval: 0}\n", func(c *Config) { c.Leases.HeartbeatInterval = 0 }},
		{"max connection age at its minimum", "listen: {grpc_max_connection_age: 1s, grpc_max_connection_age_grace: 1ms}\n", func(c *Config) {
			c.Listen.GRPCMaxConnectionAge, c.Listen.GRPCMaxConnectionAgeGrace = time.Second, time.Millisecond
		}},
		{"empty trusted sources", "authz: {trusted_priority_sources: []}\n", func(*Config) {}},
		{"one trusted source, one address", "authz: {trusted_priority_sources: [192.0.2.7/32]}\n", func(c *Config) {
			c.Authz.TrustedPrioritySources = []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}
		}},
		{"gRPC TLS without client CA", "listen: {grpc_tls: {cert_file: c, key_file: k}}\n", func(c *Config) {
			c.Listen.GRPCTLS = TLSFiles{CertFile: "c", KeyFile: "k"}
		}},
		{"trailing empty document", "limits: {max_bulkheads: 5}\n---\n", func(c *Config) { c.Limits.MaxBulkheads = 5 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(testSource, []byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := defaults()
			tt.want(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Parse =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestExampleFile(t *testing.T) {
	clearEnv(t) // Load reads the environment: not parallel
	path := filepath.Join("testdata", "example.yaml")
	c, err := Load(path, nil)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	want := defaults()
	want.Source = path
	want.Bulkheads = map[string]Bulkhead{
		"catalog": {Settings: bulkhead.Settings{MaxConcurrent: 10, MaxQueue: 20, MaxWait: 500 * time.Millisecond,
			ReserveCritical: 0.2, ReserveNormal: 0.1}, LeaseTTL: time.Minute},
		"auth":   {Settings: bulkhead.Settings{MaxConcurrent: 50, MaxQueue: 50, MaxWait: 250 * time.Millisecond}, LeaseTTL: time.Minute},
		"orders": {Settings: bulkhead.Settings{MaxConcurrent: 30, MaxQueue: 30, MaxWait: 250 * time.Millisecond}, LeaseTTL: time.Minute},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("example.yaml =\n%+v\nwant\n%+v", c, want)
	}
	// The file shows every default explicitly: it must equal Parse of the
	// bulkheads alone, so that the comments do not drift from the code.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(data), "\nbulkheads:\n")
	bare, err := Parse(path, []byte("bulkheads:\n"+after))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(bare, c) {
		t.Errorf("example.yaml's explicit settings differ from the defaults:\n%+v\n%+v", c, bare)
	}
	// The commented-out tenant template is valid once the header is set.
	text := strings.Replace(string(data), `tenant_header: ""`, "tenant_header: x-tenant-id", 1)
	text = strings.ReplaceAll(strings.ReplaceAll(text, "    # tenant:", "    tenant:"), "    #   ", "      ")
	withTenants, err := Parse(path, []byte(text))
	if err != nil {
		t.Fatalf("example.yaml with its tenant template: %v", err)
	}
	want.Authz.TenantHeader = "x-tenant-id"
	catalog := want.Bulkheads["catalog"]
	catalog.Tenant = &bulkhead.Settings{MaxConcurrent: 3, MaxQueue: 5, MaxWait: 500 * time.Millisecond}
	want.Bulkheads["catalog"] = catalog
	if !reflect.DeepEqual(withTenants, want) {
		t.Errorf("example.yaml with its tenant template =\n%+v\nwant\n%+v", withTenants, want)
	}
}

func TestEnumStrings(t *testing.T) {
	t.Parallel()
	for _, f := range []LogFormat{LogText, LogJSON} {
		if got, err := ParseLogFormat(f.String()); err != nil || got != f {
			t.Errorf("ParseLogFormat(%q) = %v, %v", f, got, err)
		}
	}
	if _, err := ParseLogLevel("loud"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseLogLevel(loud) error = %v, want ErrInvalid", err)
	}
}

// The authz section is the Check policy's own settings, with the policy's
// defaults; the leases section gives the rest of the policy's defaults.
func TestAuthzDefaultsAreThePolicys(t *testing.T) {
	c, err := Parse(testSource, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := authz.DefaultPolicy()
	if !reflect.DeepEqual(c.Authz, want.Settings) {
		t.Errorf("authz defaults = %+v, want the policy's %+v", c.Authz, want.Settings)
	}
	if c.Leases.DefaultTTL != want.DefaultLeaseTTL || c.Leases.MaxRouteTTL != want.MaxRouteLeaseTTL {
		t.Errorf("leases default_ttl %v, max_route_ttl %v; want the policy's %v, %v",
			c.Leases.DefaultTTL, c.Leases.MaxRouteTTL, want.DefaultLeaseTTL, want.MaxRouteLeaseTTL)
	}
}
