//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	alsgrpcv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// TestIstioTelemetryLogsOnlyPermits: the chart's Telemetry mode
// (istio.accessLog telemetry) with its access-log filter
// (istio.telemetryFilter, envoy.PermitLogExpression), in a real Envoy in
// front of a real daemon. The Envoy's access logger is the one istiod
// generates for an envoyHttpAls provider and a Telemetry accessLogging
// filter (istioTelemetryLogger): Envoy's gRPC logger without buffer
// settings, behind Envoy's CEL access-log filter. Its connection manager
// has the chart EnvoyFilter's access_log_flush_interval (periodic entries
// go to the same logger: Istio's provider has no log-type filter). Then:
//
//   - every admitted request's permit comes back through its end entry;
//   - a request held past the heartbeat interval has its permit renewed by
//     its periodic entries;
//   - the requests the bulkhead denies, and those on a route without a
//     Check (ext_authz disabled: no metadata), send the daemon no entry.
//
// Broken expressions are caught: without a filter (istio.telemetryFilter
// "", what the mode did before) the denied and unchecked requests' entries
// reach the daemon; with the network filter's namespace (a plausible
// slip: envoy.filters.network.ext_authz) nothing is logged and no permit
// comes back through the access log.
func TestIstioTelemetryLogsOnlyPermits(t *testing.T) {
	parallelE2E(t)
	t.Run("broken expressions are caught", func(t *testing.T) {
		network := strings.ReplaceAll(envoy.PermitLogExpression(), permit.MetadataNamespace, permit.MetadataNamespaceNetwork)
		for _, tt := range []struct{ name, expr, want string }{
			{"no filter", "", "entries without a permit"},
			{"the network filter's namespace", network, "permits released by the access log"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				problems := telemetryScenario(t, tt.expr, false)
				t.Logf("reported: %q", problems)
				if !strings.Contains(strings.Join(problems, "\n"), tt.want) {
					t.Errorf("problems reported: %q, want %q", problems, tt.want)
				}
			})
		}
	})
	if p := telemetryScenario(t, envoy.PermitLogExpression(), true); len(p) > 0 {
		t.Errorf("the chart's Telemetry filter %q:\n%s", envoy.PermitLogExpression(), strings.Join(p, "\n"))
	}
}

// The scenario's shape: bulkhead catalog has one permit, for a long
// request, and denies the requests sent meanwhile; bulkhead auth admits
// short requests (its own permits: they do not wait for catalog's to come
// back); route /orders has no Check. And how long to wait for entries that
// Envoy's gRPC logger buffers (Istio sets no buffer options: up to 16 KiB
// or 1 s).
const (
	telemetryHeartbeat = 250 * time.Millisecond
	telemetryDenied    = 3 // requests to catalog denied while the long one holds its permit
	telemetryUnchecked = 3 // requests to orders, without a Check
	telemetryShort     = 2 // requests to auth, admitted, after the long one
	telemetryFlushWait = 3 * time.Second
)

// telemetryScenario runs the scenario once, on its own daemon and Envoy
// (one worker: one logger stream, whose entries reach the daemon in
// order), the access logger istiod's for the Telemetry filter expr ("" =
// none), and returns what went wrong with permit-only logging. With
// invariant, the stack's invariant and leak check run at cleanup.
func telemetryScenario(t *testing.T, expr string, invariant bool) (problems []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := &stack{t: t, up: map[string]*testbed.Upstream{}, limits: map[string]int{"catalog": 1, "auth": telemetryShort}}
	for _, name := range routes {
		up, err := testbed.NewUpstream(name, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { up.Close() })
		s.up[name] = up
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "bulkhead.yaml")
	if err := os.WriteFile(cfgPath, []byte(listenYAML+fmt.Sprintf(`
leases: {heartbeat_interval: %v, heartbeat_ttl: 3s, recovery_window: 400ms, sweep_interval: 100ms}
bulkheads:
  catalog: {max_concurrent: 1, max_queue: 0}
  auth: {max_concurrent: %d, max_queue: 0}
`, telemetryHeartbeat, telemetryShort)), 0o600); err != nil {
		t.Fatal(err)
	}
	s.startDaemon(ctx, cfgPath, filepath.Join(dir, "addr.json"))

	// The inbound side of an Istio sidecar, as far as Bulkhead sees it:
	// ext_authz without x-bulkhead-node, the bulkhead named per route (the
	// chart's EnvoyFilter), the flush interval (the same EnvoyFilter), and
	// istiod's access logger in place of ours.
	rs := envoy.DemoRoutes(endpoint(t, s.up["catalog"].Addr()), endpoint(t, s.up["auth"].Addr()), endpoint(t, s.up["orders"].Addr()))
	rs[2].Unguarded = true // orders
	rendered, err := envoy.Render(envoy.Params{Bulkhead: endpoint(t, s.grpcAddr), NoNodeMetadata: true,
		HeartbeatInterval: telemetryHeartbeat, Routes: rs})
	if err != nil {
		t.Fatal(err)
	}
	bootstrap, err := withAccessLog(rendered, istioTelemetryLogger(t, expr))
	if err != nil {
		t.Fatal(err)
	}
	s.runEnvoy(ctx, bootstrap, 1, envoy.DefaultListenerName, "envoy")
	if invariant {
		t.Cleanup(s.checkInvariant)
	}

	entries := func(result permit.EntryResult) float64 {
		return s.counter("bulkhead_access_log_entries_total", map[string]string{"result": string(result)})
	}
	want := func(what, path string, status int) {
		if r := s.get(ctx, path, nil); r.status != status {
			t.Fatalf("%s: %d %v, want %d", what, r.status, r.err, status)
		}
	}

	// The long request holds the one permit; meanwhile requests are denied
	// and others pass on the route without a Check.
	catalog := s.up["catalog"]
	catalog.Hold()
	defer catalog.ReleaseHeld()
	long := s.getAsync(ctx, "/catalog", nil)
	if err := catalog.WaitInflight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	held := time.Now()
	for range telemetryDenied {
		want("a request above the limit", "/catalog", http.StatusServiceUnavailable)
	}
	for range telemetryUnchecked {
		want("a request without a Check", "/orders", http.StatusOK)
	}
	if !within(ctx, telemetryFlushWait, func() bool { return entries(permit.EntryRenewed) > 0 }) {
		problems = append(problems, fmt.Sprintf("no periodic entry renewed the long request's permit (held %v)", time.Since(held).Round(time.Millisecond)))
	}
	heldFor := time.Since(held)
	catalog.ReleaseHeld()
	if r := <-long; r.status != http.StatusOK {
		t.Fatalf("the long request: %d %v", r.status, r.err)
	}
	for range telemetryShort {
		want("a request within the limit", "/auth", http.StatusOK)
	}

	// Every permit back through the access log. The last entries are the
	// last short request's end entries: once they are in, so is every
	// entry logged before them (one worker, one stream, in order).
	admitted := s.counter("bulkhead_admitted_total", nil)
	released := func() float64 { return s.counter("bulkhead_releases_total", map[string]string{"source": "access_log"}) }
	if admitted != 1+telemetryShort {
		t.Fatalf("the daemon admitted %v requests, want %d", admitted, 1+telemetryShort)
	}
	if !within(ctx, telemetryFlushWait, func() bool { return released() == admitted }) {
		problems = append(problems, fmt.Sprintf("%v of %v permits released by the access log within %v of the last response",
			released(), admitted, telemetryFlushWait))
	}
	if n := entries(permit.EntryNoToken); n > 0 {
		problems = append(problems, fmt.Sprintf("%v entries without a permit reached the daemon (%d requests denied, %d without a Check)",
			n, telemetryDenied, telemetryUnchecked))
	}
	m := s.metrics()
	byResult := map[string]float64{}
	for _, r := range permit.EntryResults() {
		if v := m.Sum("bulkhead_access_log_entries_total", map[string]string{"result": string(r)}); v > 0 {
			byResult[string(r)] = v
		}
	}
	stats, err := s.envoy.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("filter %q: %d requests (%v admitted, one held %v; %d denied; %d without a Check): Envoy wrote %d entries, the daemon counted %v",
		expr, 1+telemetryShort+telemetryDenied+telemetryUnchecked, admitted, heldFor.Round(time.Millisecond), telemetryDenied, telemetryUnchecked,
		stats["access_logs.grpc_access_log.logs_written"], byResult)
	if v := m.Sum("bulkhead_heartbeat_problems_total", nil); v != 0 {
		problems = append(problems, fmt.Sprintf("%v heartbeat problems counted", v))
	}
	return problems
}

// istioTelemetryLogger is the access logger istiod generates on a
// sidecar's connection managers for a Telemetry resource whose
// accessLogging names the chart's envoyHttpAls provider (logName bulkhead)
// with the filter expression expr ("" = no filter), as
// istio/istio pilot/pkg/model/telemetry_logging.go
// (httpGrpcAccessLogFromTelemetry) and pilot/pkg/networking/core/accesslog.go
// (buildAccessLogFromTelemetry, buildAccessLogFilterFromTelemetry) build
// it: no buffer settings, Istio's default filter state objects, and for a
// filter Envoy's CEL extension filter alone (no and_filter on an HTTP
// connection manager). Its cluster is this bootstrap's Bulkhead cluster
// (istiod's is outbound|<port>||<service>).
func istioTelemetryLogger(t *testing.T, expr string) map[string]any {
	t.Helper()
	cfg, err := anypb.New(&alsgrpcv3.HttpGrpcAccessLogConfig{CommonConfig: &alsgrpcv3.CommonGrpcAccessLogConfig{
		LogName: "bulkhead",
		GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
			ClusterName: envoy.BulkheadClusterName, Authority: "bulkhead.bulkhead.svc.cluster.local",
		}}},
		TransportApiVersion:     corev3.ApiVersion_V3,
		FilterStateObjectsToLog: []string{"upstream_peer", "downstream_peer"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	al := &accesslogv3.AccessLog{Name: "envoy.access_loggers.http_grpc", ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: cfg}}
	if expr != "" {
		cel, err := anypb.New(&celv3.ExpressionFilter{Expression: expr})
		if err != nil {
			t.Fatal(err)
		}
		al.Filter = &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ExtensionFilter{
			ExtensionFilter: &accesslogv3.ExtensionFilter{
				Name:       "envoy.access_loggers.extension_filters.cel",
				ConfigType: &accesslogv3.ExtensionFilter_TypedConfig{TypedConfig: cel},
			},
		}}
	}
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(al)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// withAccessLog returns the rendered bootstrap (JSON) with logger as the
// only access logger of its first listener's connection manager.
func withAccessLog(rendered []byte, logger map[string]any) ([]byte, error) {
	raw, err := yaml.YAMLToJSON(rendered)
	if err != nil {
		return nil, err
	}
	var b map[string]any
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, err
	}
	first := func(v any) map[string]any {
		if l := list(v); len(l) > 0 {
			return obj(l[0])
		}
		return map[string]any{}
	}
	hcm := obj(first(first(first(obj(b["static_resources"])["listeners"])["filter_chains"])["filters"])["typed_config"])
	if _, ok := hcm["access_log"]; !ok {
		return nil, fmt.Errorf("the rendered connection manager has no access_log")
	}
	hcm["access_log"] = []any{logger}
	return json.Marshal(b)
}

// within polls cond until it holds, d passes or ctx ends, and reports
// whether it held.
func within(ctx context.Context, d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return cond()
		case <-time.After(10 * time.Millisecond): // polling interval, with a deadline
		}
	}
	return true
}
