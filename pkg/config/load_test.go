package config

import (
	"errors"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// The tests in this file change the environment, so none is parallel.

// clearEnv unsets every BULKHEAD_* variable Load reads, for this test only.
func clearEnv(t *testing.T) {
	t.Helper()
	names := []string{envAdminToken}
	for _, s := range scalars {
		names = append(names, envName(s.key))
	}
	for _, n := range names {
		t.Setenv(n, "") // restores the old value at cleanup
		os.Unsetenv(n)
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bulkhead.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("bulkhead", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestLoadNoFile(t *testing.T) {
	clearEnv(t)
	c, err := Load("", newFlags(t))
	if err != nil {
		t.Fatal(err)
	}
	want := defaults()
	want.Source = ""
	if c.Listen != want.Listen || !reflect.DeepEqual(c.Authz, want.Authz) || c.Leases != want.Leases || len(c.Bulkheads) != 0 {
		t.Errorf("Load(\"\") = %+v, want defaults %+v", c, want)
	}
}

func TestLoadMissingFile(t *testing.T) {
	clearEnv(t)
	path := filepath.Join(t.TempDir(), "absent.yaml")
	_, err := Load(path, nil)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("error = %v, want ErrNotExist naming %s", err, path)
	}
}

// TestEnvOverrides sets each environment variable in turn over a file that
// sets every scalar, and checks it wins.
func TestEnvOverrides(t *testing.T) {
	pki, pki2 := writePKI(t), writePKI(t)
	certCopy, keyCopy := copyFile(t, pki.cert), copyFile(t, pki.key)
	path := writeFile(t, `listen: {grpc: 127.0.0.1:1, http: 127.0.0.1:2, admin: 127.0.0.1:3}
log: {level: error, format: json}
authz: {priority_header: x-file, default_priority: critical, unknown_bulkhead: allow, deny_status: 500,
        deadline_margin: 1ms, retry_after: 3s, tenant_header: x-file-tenant, trusted_priority_sources: [10.0.0.0/8]}
leases: {default_ttl: 1m, sweep_interval: 1s, max_permits: 10}
limits: {max_bulkheads: 10, max_tenants: 10}
admin:
  token_file: `+pki.token+`
  tls: {cert_file: `+pki.cert+`, key_file: `+pki.key+`, client_ca_file: `+pki.ca+`}
bulkheads: {catalog: {max_concurrent: 1}}
`)
	tests := []struct {
		env, value string
		check      func(c *Config) bool
	}{
		{"BULKHEAD_LISTEN_GRPC", "127.0.0.1:7001", func(c *Config) bool { return c.Listen.GRPC == "127.0.0.1:7001" }},
		{"BULKHEAD_LISTEN_HTTP", "127.0.0.1:7002", func(c *Config) bool { return c.Listen.HTTP == "127.0.0.1:7002" }},
		{"BULKHEAD_LISTEN_ADMIN", "127.0.0.1:7003", func(c *Config) bool { return c.Listen.Admin == "127.0.0.1:7003" }},
		{"BULKHEAD_LOG_LEVEL", "debug", func(c *Config) bool { return c.Log.Level == slog.LevelDebug }},
		{"BULKHEAD_LOG_FORMAT", "text", func(c *Config) bool { return c.Log.Format == LogText }},
		{"BULKHEAD_AUTHZ_PRIORITY_HEADER", "", func(c *Config) bool { return c.Authz.PriorityHeader == "" }},
		{"BULKHEAD_AUTHZ_DEFAULT_PRIORITY", "best_effort", func(c *Config) bool { return c.Authz.DefaultPriority == bulkhead.BestEffort }},
		{"BULKHEAD_AUTHZ_UNKNOWN_BULKHEAD", "deny", func(c *Config) bool { return c.Authz.Unmatched == authz.Deny }},
		{"BULKHEAD_AUTHZ_DENY_STATUS", "429", func(c *Config) bool { return c.Authz.DenyStatus == 429 }},
		{"BULKHEAD_AUTHZ_DEADLINE_MARGIN", "50ms", func(c *Config) bool { return c.Authz.DeadlineMargin == 50*time.Millisecond }},
		{"BULKHEAD_AUTHZ_RETRY_AFTER", "5s", func(c *Config) bool { return c.Authz.RetryAfter == 5*time.Second }},
		{"BULKHEAD_AUTHZ_TENANT_HEADER", "x-env-tenant", func(c *Config) bool { return c.Authz.TenantHeader == "x-env-tenant" }},
		{"BULKHEAD_LEASES_DEFAULT_TTL", "2m", func(c *Config) bool {
			return c.Leases.DefaultTTL == 2*time.Minute && c.Bulkheads["catalog"].LeaseTTL == 2*time.Minute
		}},
		{"BULKHEAD_LEASES_SWEEP_INTERVAL", "250ms", func(c *Config) bool { return c.Leases.SweepInterval == 250*time.Millisecond }},
		{"BULKHEAD_LEASES_HEARTBEAT_INTERVAL", "0", func(c *Config) bool { return c.Leases.HeartbeatInterval == 0 }},
		{"BULKHEAD_LEASES_MAX_ROUTE_TTL", "90s", func(c *Config) bool { return c.Leases.MaxRouteTTL == 90*time.Second }},
		{"BULKHEAD_LISTEN_GRPC_MAX_CONNECTION_AGE", "30m", func(c *Config) bool { return c.Listen.GRPCMaxConnectionAge == 30*time.Minute }},
		{"BULKHEAD_LISTEN_GRPC_MAX_CONNECTION_AGE_GRACE", "2s", func(c *Config) bool {
			return c.Listen.GRPCMaxConnectionAgeGrace == 2*time.Second && c.Listen.GRPC == "127.0.0.1:1" // not taken for listen.grpc
		}},
		{"BULKHEAD_LISTEN_GRPC_MAX_RECV_BYTES", "1048576", func(c *Config) bool { return c.Listen.GRPCMaxRecvBytes == 1<<20 }},
		{"BULKHEAD_LISTEN_GRPC_MAX_CONCURRENT_STREAMS", "500", func(c *Config) bool { return c.Listen.GRPCMaxConcurrentStreams == 500 }},
		{"BULKHEAD_LEASES_MAX_PERMITS", "5000", func(c *Config) bool { return c.Leases.MaxPermits == 5000 }},
		{"BULKHEAD_AUTHZ_TRUSTED_PRIORITY_SOURCES", " 127.0.0.0/8, ::1/128 ,", func(c *Config) bool {
			return reflect.DeepEqual(c.Authz.TrustedPrioritySources,
				[]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")})
		}},
		{"BULKHEAD_AUTHZ_TRUSTED_PRIORITY_SOURCES", "", func(c *Config) bool { return c.Authz.TrustedPrioritySources == nil }},
		{"BULKHEAD_LIMITS_MAX_BULKHEADS", "20", func(c *Config) bool { return c.Limits.MaxBulkheads == 20 }},
		{"BULKHEAD_LIMITS_MAX_TENANTS", "20", func(c *Config) bool { return c.Limits.MaxTenants == 20 }},
		{"BULKHEAD_ADMIN_TOKEN_FILE", pki2.token, func(c *Config) bool { return c.Admin.TokenFile == pki2.token }},
		{"BULKHEAD_ADMIN_TLS_CERT_FILE", certCopy, func(c *Config) bool { return c.Admin.TLS.CertFile == certCopy }},
		{"BULKHEAD_ADMIN_TLS_KEY_FILE", keyCopy, func(c *Config) bool { return c.Admin.TLS.KeyFile == keyCopy }},
		{"BULKHEAD_ADMIN_TLS_CLIENT_CA_FILE", pki2.ca, func(c *Config) bool { return c.Admin.TLS.ClientCAFile == pki2.ca }},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			clearEnv(t)
			t.Setenv(tt.env, tt.value)
			c, err := Load(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("%s=%q not applied: %+v", tt.env, tt.value, c)
			}
		})
	}
	t.Run("default bulkhead", func(t *testing.T) {
		clearEnv(t)
		t.Setenv("BULKHEAD_AUTHZ_UNKNOWN_BULKHEAD", "default")
		t.Setenv("BULKHEAD_AUTHZ_DEFAULT_BULKHEAD", "catalog")
		c, err := Load(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.Authz.Unmatched != authz.UseDefault || c.Authz.DefaultBulkhead != "catalog" {
			t.Errorf("authz = %+v", c.Authz)
		}
	})
}

func TestEnvInvalidNamesVariable(t *testing.T) {
	clearEnv(t)
	t.Setenv("BULKHEAD_AUTHZ_DENY_STATUS", "abc")
	t.Setenv("BULKHEAD_LISTEN_GRPC", "nowhere")
	t.Setenv("BULKHEAD_LISTEN_ADMIN", "0.0.0.0:9091")
	t.Setenv("BULKHEAD_LIMITS_MAX_TENANTS", "0")
	_, err := Load("", nil)
	for _, want := range []string{
		`config: authz.deny_status: must be an integer (got "abc" from BULKHEAD_AUTHZ_DENY_STATUS)`,
		`config: limits.max_tenants: must be in 1..1000000 (got 0 from BULKHEAD_LIMITS_MAX_TENANTS)`,
		`config: listen.admin: ` + nonLoopback + ` (got "0.0.0.0:9091" from BULKHEAD_LISTEN_ADMIN)`,
		`config: listen.grpc: must be host:port with a numeric port, like "127.0.0.1:9001" (port 0 picks a free one) (got "nowhere" from BULKHEAD_LISTEN_GRPC)`,
	} {
		if err == nil || !hasLineWithPrefix(err.Error(), want) {
			t.Errorf("error\n%v\nhas no line %q", err, want)
		}
	}
}

func TestParseIgnoresEnv(t *testing.T) {
	clearEnv(t)
	t.Setenv("BULKHEAD_LISTEN_GRPC", "127.0.0.1:7001")
	c, err := Parse(testSource, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen.GRPC != DefaultListenGRPC {
		t.Errorf("Parse used the environment: listen.grpc = %q", c.Listen.GRPC)
	}
}

// TestPrecedence: flag > env > file > default, for each flag-backed setting.
func TestPrecedence(t *testing.T) {
	type layer struct{ file, env, flag string }
	settings := []struct {
		key, env, flag, def string
		get                 func(c *Config) string
	}{
		{"grpc", "BULKHEAD_LISTEN_GRPC", "--listen-grpc", DefaultListenGRPC, func(c *Config) string { return c.Listen.GRPC }},
		{"http", "BULKHEAD_LISTEN_HTTP", "--listen-http", DefaultListenHTTP, func(c *Config) string { return c.Listen.HTTP }},
		{"admin", "BULKHEAD_LISTEN_ADMIN", "--listen-admin", DefaultListenAdmin, func(c *Config) string { return c.Listen.Admin }},
		{"level", "BULKHEAD_LOG_LEVEL", "--log-level", "INFO", func(c *Config) string { return c.Log.Level.String() }},
		{"format", "BULKHEAD_LOG_FORMAT", "--log-format", "text", func(c *Config) string { return c.Log.Format.String() }},
	}
	values := map[string][3]string{ // file, env, flag values; distinct per setting
		"grpc":   {"127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"},
		"http":   {"127.0.0.1:2001", "127.0.0.1:2002", "127.0.0.1:2003"},
		"admin":  {"127.0.0.1:3001", "[::1]:3002", "localhost:3003"},
		"level":  {"debug", "warn", "error"},
		"format": {"json", "text", "json"},
	}
	want := map[string][3]string{ // what wins with file; file+env; file+env+flag
		"grpc":   values["grpc"],
		"http":   values["http"],
		"admin":  values["admin"],
		"level":  {"DEBUG", "WARN", "ERROR"},
		"format": {"json", "text", "json"},
	}
	for _, s := range settings {
		v := values[s.key]
		section := map[string]string{"grpc": "listen", "http": "listen", "admin": "listen", "level": "log", "format": "log"}[s.key]
		path := writeFile(t, section+": {"+s.key+": \""+v[0]+"\"}\n")
		for i, l := range []layer{{file: path}, {file: path, env: v[1]}, {file: path, env: v[1], flag: v[2]}, {}, {env: v[1]}} {
			clearEnv(t)
			if l.env != "" {
				t.Setenv(s.env, l.env)
			}
			var args []string
			if l.flag != "" {
				args = []string{s.flag + "=" + l.flag}
			}
			c, err := Load(l.file, newFlags(t, args...))
			if err != nil {
				t.Fatalf("%s layers %+v: %v", s.key, l, err)
			}
			var exp string
			switch {
			case i < 3:
				exp = want[s.key][i]
			case i == 3:
				exp = s.def
			default:
				exp = want[s.key][1]
			}
			if got := s.get(c); got != exp {
				t.Errorf("%s with layers %+v = %q, want %q", s.key, l, got, exp)
			}
		}
	}
}

func TestFlagErrorNamesFlag(t *testing.T) {
	clearEnv(t)
	_, err := Load("", newFlags(t, "--log-format=xml"))
	want := `config: log.format: must be text or json (got "xml" from --log-format)`
	if err == nil || !hasLineWithPrefix(err.Error(), want) {
		t.Errorf("error = %v, want line %q", err, want)
	}
}

func TestRegisterFlags(t *testing.T) {
	fs := newFlags(t, "--config=/etc/bulkhead.yaml", "--address-file=/tmp/addr.json")
	for _, name := range []string{FlagConfig, FlagAddressFile, FlagListenGRPC, FlagListenHTTP, FlagListenAdmin, FlagLogLevel, FlagLogFormat} {
		if fs.Lookup(name) == nil {
			t.Errorf("flag --%s not registered", name)
		}
	}
	if got, _ := fs.GetString(FlagConfig); got != "/etc/bulkhead.yaml" {
		t.Errorf("--config = %q", got)
	}
	clearEnv(t)
	// Flags that were not given do not override anything.
	c, err := Load("", fs)
	if err != nil || c.Listen.GRPC != DefaultListenGRPC {
		t.Errorf("Load with unset flags = %+v, %v", c, err)
	}
}

// TestStrayEnvIgnored: only the documented variables count; a variable named
// after a section does not hide that section's settings.
func TestStrayEnvIgnored(t *testing.T) {
	clearEnv(t)
	t.Setenv("BULKHEAD_LISTEN", "x")
	t.Setenv("BULKHEAD_BULKHEADS_CATALOG_MAX_CONCURRENT", "0")
	c, err := Load(writeFile(t, "bulkheads: {catalog: {max_concurrent: 3}}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen.GRPC != DefaultListenGRPC || c.Bulkheads["catalog"].Settings.MaxConcurrent != 3 {
		t.Errorf("stray variables changed the config: %+v", c)
	}
}

// TestOrigin: a problem names the layer whose value viper used, for every
// combination of file, env and flag.
func TestOrigin(t *testing.T) {
	const reason = `: log.format: must be text or json (got `
	for _, tt := range []struct {
		file, env, flag string
		want            string // the "got" part, "" for no problem
	}{
		{"", "", "", ""},
		{"f", "", "", `"f")`},
		{"", "e", "", `"e" from BULKHEAD_LOG_FORMAT)`},
		{"", "", "g", `"g" from --log-format)`},
		{"f", "e", "", `"e" from BULKHEAD_LOG_FORMAT)`},
		{"f", "", "g", `"g" from --log-format)`},
		{"", "e", "g", `"g" from --log-format)`},
		{"f", "e", "g", `"g" from --log-format)`},
		{"same", "same", "", `"same" from BULKHEAD_LOG_FORMAT)`},
		{"", "same", "same", `"same" from --log-format)`},
		{"f", "text", "", ""}, // a good env value hides the file's bad one
	} {
		clearEnv(t)
		path := ""
		if tt.file != "" {
			path = writeFile(t, "log: {format: "+tt.file+"}\n")
		}
		if tt.env != "" {
			t.Setenv("BULKHEAD_LOG_FORMAT", tt.env)
		}
		var args []string
		if tt.flag != "" {
			args = append(args, "--log-format="+tt.flag)
		}
		_, err := Load(path, newFlags(t, args...))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tt, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), reason+tt.want)):
			t.Errorf("%+v: error = %v, want %q", tt, err, reason+tt.want)
		}
	}
	// A setting with no flag, and a value of another type in the file.
	clearEnv(t)
	t.Setenv("BULKHEAD_AUTHZ_DENY_STATUS", "200")
	_, err := Load(writeFile(t, "authz: {deny_status: 200}\n"), nil)
	if want := `: authz.deny_status: must be in 400..599 (got 200 from BULKHEAD_AUTHZ_DENY_STATUS)`; err == nil ||
		!strings.Contains(err.Error(), want) {
		t.Errorf("error = %v, want line %q", err, want)
	}
	clearEnv(t)
	_, err = Load(writeFile(t, "authz: {deny_status: 200}\n"), nil)
	if want := `: authz.deny_status: must be in 400..599 (got 200)`; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("error = %v, want line %q", err, want)
	}
}
