package charts

import (
	"context"
	stdjson "encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	telemetryv1alpha1 "istio.io/api/telemetry/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc/envoyproctest"
)

// snippet is the Envoy ConfigMap's document.
type snippet struct {
	AccessLogOptions     map[string]any            `json:"access_log_options"`
	AccessLog            []any                     `json:"access_log"`
	HTTPFilters          []any                     `json:"http_filters"`
	TypedPerFilterConfig map[string]map[string]any `json:"typed_per_filter_config"`
	Clusters             []any                     `json:"clusters"`
	// TCPListenerFilters are the filters of each connection bulkhead's TCP
	// listener.
	TCPListenerFilters map[string][]any `json:"tcp_listener_filters"`
	// Shares (bulkheads in shares.mode shares or auto): the bootstrap's
	// runtime layers (RTDS) and load reports (LRS), each such bulkhead's
	// route pair and its share cluster.
	LayeredRuntime map[string]any   `json:"layered_runtime"`
	ClusterManager map[string]any   `json:"cluster_manager"`
	SharesRoutes   map[string][]any `json:"shares_routes"`
	SharesClusters []any            `json:"shares_clusters"`

	raw string // the document as rendered
}

// A real Envoy accepts the plain-Envoy snippet: a bootstrap made of its
// periodic access-log option, access log, ext_authz filter, one route per
// bulkhead with that bulkhead's per-route block, and its cluster passes
// `envoy --mode validate`. Its flush interval is the daemon's heartbeat
// interval.
func TestEnvoySnippetValidatesInEnvoy(t *testing.T) {
	envoyBin := envoyproctest.Binary(t)
	d := newDecoder(t)
	for _, f := range []string{filepath.Join(chartDir(t), "ci", "full-values.yaml"), filepath.Join(chartDir(t), "ci", "minimal-values.yaml"),
		filepath.Join(chartDir(t), "ci", "redis-values.yaml")} {
		t.Run(valuesName(f), func(t *testing.T) {
			ms := render(t, f)
			s := renderedSnippet(t, d, ms)
			cfg := daemonConfig(t, d, ms)
			if got := flushInterval(t, s.AccessLogOptions); cfg.Leases.HeartbeatInterval == 0 || got != cfg.Leases.HeartbeatInterval {
				t.Errorf("snippet access_log_flush_interval %v, daemon's leases.heartbeat_interval %v: want them equal and on",
					got, cfg.Leases.HeartbeatInterval)
			}
			want, conns := map[string]map[string]any{}, map[string]map[string]any{}
			for name, b := range valuesBulkheads(t, f) {
				if b["connections"] != nil {
					conns[name] = b
				} else {
					want[name] = b
				}
			}
			if len(s.TCPListenerFilters) != len(conns) {
				t.Fatalf("snippet: %d TCP listener filter sets, want one per connection bulkhead (%d)", len(s.TCPListenerFilters), len(conns))
			}
			if len(s.AccessLog) != 2 || len(s.HTTPFilters) != 1 || len(s.Clusters) != 1 || len(s.TypedPerFilterConfig) != len(want) {
				t.Fatalf("snippet pieces: %d access logs, %d filters, %d clusters, %d per-route blocks (want 2, 1, 1, %d)",
					len(s.AccessLog), len(s.HTTPFilters), len(s.Clusters), len(s.TypedPerFilterConfig), len(want))
			}
			if !strings.Contains(s.raw, "buffer_size_bytes: 0") {
				t.Error("the access log does not set buffer_size_bytes: 0")
			}
			// Decode the pieces into Envoy's API types too: the names and
			// values, not only the shape, must be right.
			checkAccessLogs(t, "snippet", envoyAccessLogs(t, d, ms)["snippet"], cfg.Leases.HeartbeatInterval)
			var filter hcmv3.HttpFilter
			unmarshalProto(t, s.HTTPFilters[0], &filter)
			var authz extauthzv3.ExtAuthz
			if err := filter.GetTypedConfig().UnmarshalTo(&authz); err != nil {
				t.Fatal(err)
			}
			if filter.GetName() != "envoy.filters.http.ext_authz" || authz.GetClearRouteCache() {
				t.Errorf("ext_authz filter %q clear_route_cache %v", filter.GetName(), authz.GetClearRouteCache())
			}
			// Replicas on the Redis ledger, behind the headless Service: a
			// Check is retried on another replica when one dies, and a replica
			// that fails its health check leaves the rotation. One daemon: no.
			replicas := cfg.Ledger.Backend == config.LedgerRedis
			retry := authz.GetGrpcService().GetRetryPolicy()
			if (retry != nil) != replicas || replicas && (retry.GetRetryOn() != "connect-failure,refused-stream,reset" || retry.GetNumRetries().GetValue() != 2) {
				t.Errorf("ext_authz retry_policy %v with the %s ledger", retry, cfg.Ledger.Backend)
			}
			if _, hc := s.Clusters[0].(map[string]any)["health_checks"]; hc != replicas {
				t.Errorf("bulkhead cluster health checks %v with the %s ledger", hc, cfg.Ledger.Backend)
			}

			checkSharesPieces(t, s, cfg, valuesBulkheads(t, f))

			var names []string
			for name := range s.TypedPerFilterConfig {
				names = append(names, name)
			}
			sort.Strings(names)
			var routes []any
			for _, name := range names {
				if pairs, ok := s.SharesRoutes[name]; ok {
					// The snippet leaves the upstream's cluster to the user
					// (each pair's strict route).
					for i := 0; i < len(pairs); i += 2 {
						pairs[i].(map[string]any)["route"].(map[string]any)["cluster"] = "upstream"
					}
					routes = append(routes, pairs...)
					continue
				}
				routes = append(routes, map[string]any{
					"match":                   map[string]any{"prefix": "/" + name},
					"route":                   map[string]any{"cluster": "upstream"},
					"typed_per_filter_config": s.TypedPerFilterConfig[name],
				})
			}
			var tcpListeners []any
			for name, filters := range s.TCPListenerFilters {
				// The snippet leaves the database's cluster to the user.
				proxy := filters[1].(map[string]any)["typed_config"].(map[string]any)
				if proxy["cluster"] != "UPSTREAM_CLUSTER" {
					t.Errorf("%s: tcp_proxy cluster %v", name, proxy["cluster"])
				}
				proxy["cluster"] = "upstream"
				if proxy["upstream_connect_mode"] != "ON_DOWNSTREAM_DATA" {
					t.Errorf("%s: tcp_proxy upstream_connect_mode %v: the upstream would see connections before their Check", name, proxy["upstream_connect_mode"])
				}
				if got := flushInterval(t, proxy["access_log_options"].(map[string]any)); got != cfg.Leases.HeartbeatInterval {
					t.Errorf("%s: tcp_proxy access_log_flush_interval %v, want the daemon's %v", name, got, cfg.Leases.HeartbeatInterval)
				}
				tcpListeners = append(tcpListeners, map[string]any{
					"name": "tcp-" + name, "address": sockAddr("127.0.0.1", 0),
					"filter_chains": []any{map[string]any{"filters": filters}},
				})
			}
			upstream := func(name string) map[string]any {
				return map[string]any{
					"name": name, "type": "STATIC", "connect_timeout": "1s",
					"load_assignment": map[string]any{"cluster_name": name, "endpoints": []any{map[string]any{"lb_endpoints": []any{map[string]any{
						"endpoint": map[string]any{"address": sockAddr("127.0.0.1", 1)}}}}}},
				}
			}
			clusters := append(s.Clusters, upstream("upstream"))
			for _, c := range s.SharesClusters {
				// A copy of the upstream's cluster with the snippet's fields.
				share := c.(map[string]any)
				full := upstream(share["name"].(string))
				for k, v := range share {
					full[k] = v
				}
				clusters = append(clusters, full)
			}
			bootstrap := map[string]any{
				"admin": map[string]any{"address": sockAddr("127.0.0.1", 0)},
				"static_resources": map[string]any{
					"listeners": append([]any{map[string]any{
						"name":    "test",
						"address": sockAddr("127.0.0.1", 0),
						"filter_chains": []any{map[string]any{"filters": []any{map[string]any{
							"name": "envoy.filters.network.http_connection_manager",
							"typed_config": map[string]any{
								"@type":              "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
								"stat_prefix":        "test",
								"access_log_options": s.AccessLogOptions,
								"access_log":         s.AccessLog,
								"http_filters":       append(s.HTTPFilters, map[string]any{"name": "envoy.filters.http.router", "typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}),
								"route_config":       map[string]any{"name": "r", "virtual_hosts": []any{map[string]any{"name": "v", "domains": []any{"*"}, "routes": routes}}},
							},
						}}}},
					}}, tcpListeners...),
					"clusters": clusters,
				},
			}
			if s.LayeredRuntime != nil {
				// RTDS and LRS need the node's id and cluster (the snippet says so).
				bootstrap["node"] = map[string]any{"id": "test-envoy", "cluster": "test"}
				bootstrap["layered_runtime"] = s.LayeredRuntime
				bootstrap["cluster_manager"] = s.ClusterManager
			}
			envoyValidate(t, envoyBin, bootstrap)
		})
	}
}

func sockAddr(host string, port int) map[string]any {
	return map[string]any{"socket_address": map[string]any{"address": host, "port_value": port}}
}

// envoyValidate runs `envoy --mode validate` on the bootstrap.
func envoyValidate(t *testing.T, bin string, bootstrap any) {
	t.Helper()
	raw, err := stdjson.MarshalIndent(bootstrap, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--mode", "validate", "--config-path", path, "--log-level", "warn").CombinedOutput()
	if err != nil {
		t.Fatalf("envoy --mode validate: %v\n%s\nbootstrap:\n%s", err, out, raw)
	}
}

// unmarshalProto converts a YAML-decoded value to JSON and decodes it into
// m with protojson (unknown fields are errors; Any types must be linked).
func unmarshalProto(t *testing.T, v any, m proto.Message) {
	t.Helper()
	raw, err := stdjson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(raw, m); err != nil {
		t.Fatalf("%T: %v\n%s", m, err, raw)
	}
}

// Istio: the mesh config providers decode into Istio's MeshConfig types;
// each EnvoyFilter patch value decodes into the Envoy type it patches,
// names its bulkhead, sets the connection manager's access_log_flush_interval
// to the daemon's heartbeat interval, and (accessLog envoyFilter) adds the
// gRPC access loggers on the Bulkhead service's outbound cluster: the
// release logger with buffer_size_bytes 0, and the periodic entries' own,
// batched.
func TestIstioResources(t *testing.T) {
	d := newDecoder(t)
	for _, tc := range []struct {
		file          string
		policies      int
		accessLogs    int // EnvoyFilter access-log patches
		telemetries   int
		withPriority  string
		providerCount int
	}{
		{file: "istio-values.yaml", policies: 2, accessLogs: 2, withPriority: "auth", providerCount: 2},
		{file: "istio-telemetry-values.yaml", policies: 0, accessLogs: 0, telemetries: 1, providerCount: 2},
	} {
		t.Run(tc.file, func(t *testing.T) {
			ms := render(t, filepath.Join(chartDir(t), "ci", tc.file))
			heartbeat := daemonConfig(t, d, ms).Leases.HeartbeatInterval
			cm := decodeAs[*corev1.ConfigMap](t, d, find(ms, "ConfigMap", "rel-bulkhead-istio")[0])
			var mc struct {
				MeshConfig struct {
					ExtensionProviders []any `json:"extensionProviders"`
				} `json:"meshConfig"`
			}
			if err := yaml.UnmarshalStrict([]byte(cm.Data["meshconfig.yaml"]), &mc); err != nil {
				t.Fatal(err)
			}
			if len(mc.MeshConfig.ExtensionProviders) != tc.providerCount {
				t.Fatalf("%d extension providers", len(mc.MeshConfig.ExtensionProviders))
			}
			for _, p := range mc.MeshConfig.ExtensionProviders {
				var ep meshv1alpha1.MeshConfig_ExtensionProvider
				unmarshalProto(t, p, &ep)
				switch {
				case ep.GetEnvoyExtAuthzGrpc() != nil:
					g := ep.GetEnvoyExtAuthzGrpc()
					if g.GetService() != "rel-bulkhead.mesh.svc.cluster.local" || g.GetPort() != 9001 || g.GetTimeout() == nil || g.GetClearRouteCache() {
						t.Errorf("envoyExtAuthzGrpc %v: want the service, port 9001, a timeout (Istio's default is 600s), no clear_route_cache", g)
					}
				case ep.GetEnvoyHttpAls() != nil:
					if a := ep.GetEnvoyHttpAls(); a.GetService() != "rel-bulkhead.mesh.svc.cluster.local" || a.GetPort() != 9001 {
						t.Errorf("envoyHttpAls %v", a)
					}
				default:
					t.Errorf("unexpected provider %v", &ep)
				}
			}
			if n := len(find(ms, "AuthorizationPolicy", "")); n != tc.policies {
				t.Errorf("%d AuthorizationPolicies, want %d", n, tc.policies)
			}
			if n := len(find(ms, "Telemetry", "")); n != tc.telemetries {
				t.Errorf("%d Telemetry resources, want %d", n, tc.telemetries)
			}
			for _, m := range find(ms, "Telemetry", "") {
				checkTelemetry(t, m, decodeAs[*telemetryv1alpha1.Telemetry](t, d, m), envoy.PermitLogExpression())
			}
			accessLogs := 0
			for _, m := range find(ms, "EnvoyFilter", "") {
				ef := decodeAs[*networkingv1alpha3.EnvoyFilter](t, d, m)
				flush := time.Duration(0)
				for _, p := range ef.GetConfigPatches() {
					if p.GetMatch().GetContext() != networkingv1alpha3.EnvoyFilter_SIDECAR_INBOUND || p.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_MERGE {
						t.Errorf("%s: patch %v: want MERGE on SIDECAR_INBOUND", m, p)
					}
					value := p.GetPatch().GetValue().AsMap()
					switch p.GetApplyTo() {
					case networkingv1alpha3.EnvoyFilter_HTTP_ROUTE:
						var r routev3.Route
						unmarshalProto(t, value, &r)
						var per extauthzv3.ExtAuthzPerRoute
						if err := r.GetTypedPerFilterConfig()["envoy.filters.http.ext_authz"].UnmarshalTo(&per); err != nil {
							t.Fatalf("%s: %v", m, err)
						}
						ext := per.GetCheckSettings().GetContextExtensions()
						if "bulkhead-"+ext["bulkhead"] != m.Name {
							t.Errorf("%s names bulkhead %q", m, ext["bulkhead"])
						}
						if ext["bulkhead"] == tc.withPriority && ext["priority"] != "critical" {
							t.Errorf("%s: priority %q, want critical", m, ext["priority"])
						}
					case networkingv1alpha3.EnvoyFilter_NETWORK_FILTER:
						hcm := patchedHCM(t, value)
						flush = hcm.GetAccessLogOptions().GetAccessLogFlushInterval().AsDuration()
						if len(hcm.GetAccessLog()) == 0 {
							continue
						}
						accessLogs++
						checkAccessLogs(t, m.String(), hcm.GetAccessLog(), heartbeat)
						for _, l := range hcm.GetAccessLog() {
							if got := fmt.Sprint(l); !strings.Contains(got, "outbound|9001||rel-bulkhead.mesh.svc.cluster.local") {
								t.Errorf("%s: access log %s", m, got)
							}
						}
						if raw, _ := stdjson.Marshal(value); !strings.Contains(string(raw), `"buffer_size_bytes":0`) {
							t.Errorf("%s: access log without buffer_size_bytes 0", m)
						}
					default:
						t.Errorf("%s: unexpected patch %v", m, p.GetApplyTo())
					}
				}
				if heartbeat == 0 || flush != heartbeat {
					t.Errorf("%s: access_log_flush_interval %v, daemon's leases.heartbeat_interval %v: want them equal and on", m, flush, heartbeat)
				}
			}
			if accessLogs != tc.accessLogs {
				t.Errorf("%d access-log patches, want %d", accessLogs, tc.accessLogs)
			}
		})
	}
}
