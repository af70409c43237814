package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc/envoyproctest"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// TestConfigsRender renders every configuration, checks the lines each one
// is about, and has the real Envoy validate them when it is installed.
func TestConfigsRender(t *testing.T) {
	up, side := envoy.Endpoint{Host: "127.0.0.1", Port: 8081}, envoy.Endpoint{Host: "127.0.0.1", Port: 9001}
	rendered := map[string]string{}
	for _, spec := range append(configSpecs(true), heartbeatSpecs()...) {
		var more []envoy.Endpoint
		if spec.redisReplicas > 1 {
			more = []envoy.Endpoint{{Host: "127.0.0.1", Port: 9002}}
		}
		b, err := spec.render(up, side, more...)
		if err != nil {
			t.Fatalf("%s: %v", spec.Name, err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v\n%s", spec.Name, err, b)
		}
		rendered[spec.Name] = string(b)
	}
	tests := []struct {
		config       string
		want, reject []string
	}{
		{Floor, []string{"envoy.filters.http.router"}, []string{"ext_authz", "access_log", "circuit_breakers"}},
		{Noop, []string{"envoy.filters.http.ext_authz", "timeout: 1s", "bulkhead: \"bench\""}, []string{"access_log"}},
		{Bulkhead, []string{"envoy.filters.http.ext_authz", "buffer_size_bytes: 0", "access_log_flush_interval: 1s"}, []string{"buffer_flush_interval: 0.001s"}},
		{Breaker, []string{"max_requests: 1000"}, []string{"ext_authz", "access_log"}},
		{Batched, []string{"buffer_size_bytes: 16384", "buffer_flush_interval: 0.001s"}, []string{"buffer_size_bytes: 0"}},
		{NoopALS, []string{"envoy.filters.http.ext_authz", "buffer_size_bytes: 0"}, nil},
		{HeartbeatOn, []string{"envoy.filters.http.ext_authz", "access_log_flush_interval: 1s", "log_name: bulkhead-heartbeat",
			"buffer_size_bytes: 0", "buffer_size_bytes: 16384", "buffer_flush_interval: 0.25s"}, nil},
		{HeartbeatSingle, []string{"envoy.filters.http.ext_authz", "access_log_flush_interval: 1s", "buffer_size_bytes: 0"},
			[]string{"bulkhead-heartbeat", "buffer_flush_interval", "log_type_filter"}},
		{RedisOne, []string{"envoy.filters.http.ext_authz", "buffer_size_bytes: 0", "port_value: 9001"}, []string{"health_checks", "port_value: 9002"}},
		{RedisTwo, []string{"envoy.filters.http.ext_authz", "port_value: 9001", "port_value: 9002", "health_checks"}, nil},
		{RedisLeases, []string{"envoy.filters.http.ext_authz", "buffer_size_bytes: 0", "port_value: 9001"}, []string{"health_checks", "port_value: 9002"}},
		{RedisLeasesTwo, []string{"envoy.filters.http.ext_authz", "port_value: 9001", "port_value: 9002", "health_checks"}, nil},
		{RedisTwoNear, []string{"port_value: 9001", "port_value: 9002", "health_checks"}, []string{envoy.BulkheadAffinityListener}},
		{RedisLeasesTwoNear, []string{"port_value: 9001", "port_value: 9002", "health_checks", envoy.BulkheadAffinityListener}, nil},
		{HeartbeatOff, []string{"envoy.filters.http.ext_authz", "buffer_size_bytes: 0"}, []string{"access_log_flush_interval"}},
		{SharesFar, []string{"envoy.filters.http.ext_authz", `runtime_key: "bulkhead.strict.bench"`, `name: "bench_shares"`, "lrs_server", "rtds_layer"}, nil},
	}
	for _, tt := range tests {
		got := rendered[tt.config]
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s lacks %q", tt.config, w)
			}
		}
		for _, r := range tt.reject {
			if strings.Contains(got, r) {
				t.Errorf("%s has %q", tt.config, r)
			}
		}
	}

	bin := envoyproctest.Binary(t)
	dir := t.TempDir()
	for name, cfg := range rendered {
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(t.Context(), bin, "--mode", "validate", "--disable-hot-restart", "-l", "warning", "-c", path).CombinedOutput()
		if err != nil {
			t.Errorf("envoy --mode validate %s: %v\n%s", name, err, out)
		}
	}
}

func TestDaemonConfigParses(t *testing.T) {
	tests := []struct {
		sidecar, redis string
		interval       time.Duration
		backend        config.LedgerBackend
		leases         bool // ledger.redis.capacity_leases
		limit          int  // max_concurrent, for a closed loop of 32 connections
	}{
		{sidecarDaemon, "", permit.DefaultHeartbeatInterval, config.LedgerMemory, false, limit},
		{sidecarHeartbeatOn, "", permit.DefaultHeartbeatInterval, config.LedgerMemory, false, limit},
		{sidecarHeartbeatSingle, "", permit.DefaultHeartbeatInterval, config.LedgerMemory, false, limit},
		{sidecarHeartbeatOff, "", 0, config.LedgerMemory, false, limit},
		{sidecarRedisOne, "127.0.0.1:6380", permit.DefaultHeartbeatInterval, config.LedgerRedis, false, limit},
		{sidecarRedisTwo, "127.0.0.1:6381", permit.DefaultHeartbeatInterval, config.LedgerRedis, false, limit},
		{sidecarRedisLeases, "127.0.0.1:6382", permit.DefaultHeartbeatInterval, config.LedgerRedis, true, limit},
		{sidecarRedisLeasesTwo, "127.0.0.1:6383", permit.DefaultHeartbeatInterval, config.LedgerRedis, true, limit},
		{sidecarRedisBaseline, "127.0.0.1:6384", permit.DefaultHeartbeatInterval, config.LedgerRedis, false, limit},
		{sidecarRedisTwoNear, "127.0.0.1:6385", permit.DefaultHeartbeatInterval, config.LedgerRedis, false, 32},
		{sidecarRedisLeasesTwoNear, "127.0.0.1:6386", permit.DefaultHeartbeatInterval, config.LedgerRedis, true, 32},
	}
	for _, tt := range tests {
		t.Run(tt.sidecar, func(t *testing.T) {
			cfg, err := config.Parse("bench.yaml", []byte(daemonConfig(tt.sidecar, tt.redis, 32)))
			if err != nil {
				t.Fatal(err)
			}
			if b, ok := cfg.Bulkheads[routeName]; !ok || b.Settings.MaxConcurrent != tt.limit {
				t.Fatalf("bulkheads = %+v, want max_concurrent %d", cfg.Bulkheads, tt.limit)
			}
			if got := cfg.Leases.HeartbeatInterval; got != tt.interval {
				t.Fatalf("leases.heartbeat_interval = %v, want %v", got, tt.interval)
			}
			if l := cfg.Ledger; l.Backend != tt.backend || l.Redis.Address != tt.redis || (tt.redis != "" && l.OnUnavailable.String() != "fail_closed") {
				t.Fatalf("ledger = %+v, want backend %v on %q, failing closed", l, tt.backend, tt.redis)
			}
			// On by default; only the Redis ledger reads it.
			if got := cfg.Ledger.Redis.CapacityLeases; cfg.Ledger.Backend == config.LedgerRedis && got != tt.leases {
				t.Fatalf("ledger.redis.capacity_leases = %v, want %v", got, tt.leases)
			}
		})
	}
}

func TestParseFlagsConfigs(t *testing.T) {
	tests := []struct {
		configs string
		ok      bool
	}{
		{"", true},
		{RedisLeases, true},
		{Bulkhead + "," + RedisLeases + "," + RedisLeasesTwo, true},
		{NoopOTel + "," + RedisOneBaseline, true}, // opt-in and -baseline configurations
		{Bulkhead + ",bulkhead-redis-lease", false},
		{HeartbeatOn, false}, // the heartbeat phase's, not the loops'
		{Bulkhead + ",", false},
	}
	for _, tt := range tests {
		var stderr strings.Builder
		o, err := parseFlags([]string{"-configs", tt.configs}, &stderr)
		if (err == nil) != tt.ok {
			t.Errorf("-configs %q: err %v, want ok=%v", tt.configs, err, tt.ok)
		}
		if err == nil && o.configs != tt.configs {
			t.Errorf("-configs %q: options %q", tt.configs, o.configs)
		}
		if err != nil && !strings.Contains(stderr.String(), "unknown configuration") {
			t.Errorf("-configs %q: stderr %q does not say why", tt.configs, stderr.String())
		}
	}
}
