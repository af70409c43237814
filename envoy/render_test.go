package envoy_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc/envoyproctest"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// paramSets are rendered and checked by every test below, and validated by
// the real Envoy when it is installed. The TLS sets name real PEM files.
func paramSets(t *testing.T) map[string]envoy.Params {
	t.Helper()
	dir := t.TempDir()
	ca := testkit.NewCA(t, "bulkhead CA")
	certPEM, keyPEM := ca.Issue(t, "front-proxy", false)
	caFile := testkit.WriteFile(t, dir, "ca.crt", ca.PEM)
	certFile := testkit.WriteFile(t, dir, "envoy.crt", certPEM)
	keyFile := testkit.WriteFile(t, dir, "envoy.key", keyPEM)

	mtls := envoy.DemoParams()
	mtls.ListenerPort, mtls.AdminPort = 0, 0
	mtls.BulkheadTLS = &envoy.UpstreamTLS{CAFile: caFile, CertFile: certFile, KeyFile: keyFile} // IP SAN 127.0.0.1, no SNI
	tlsDNS := envoy.DemoParams()
	tlsDNS.Bulkhead = envoy.Endpoint{Host: "bulkhead.mesh.svc", Port: 9001}
	tlsDNS.BulkheadTLS = &envoy.UpstreamTLS{CAFile: caFile} // SNI and DNS SAN from the host
	mtlsSNI := envoy.DemoParams()
	mtlsSNI.BulkheadTLS = &envoy.UpstreamTLS{CAFile: caFile, ServerName: "bulkhead.test", CertFile: certFile, KeyFile: keyFile}

	zero := envoy.DemoParams()
	zero.ListenerPort, zero.AdminPort = 0, 0

	custom := envoy.Params{
		NodeID:                 "edge-1",
		NodeCluster:            "edge",
		ListenerName:           "ingress",
		ListenerAddress:        "0.0.0.0",
		Bulkhead:               envoy.Endpoint{Host: "bulkhead.mesh.svc", Port: 9001},
		ExtAuthzTimeout:        2500 * time.Millisecond,
		FailureModeAllow:       true,
		StatusOnError:          429,
		AccessLogExcludeHeader: "x-test-no-access-log",
		Routes: []envoy.Route{
			{Name: "catalog-v2", Prefix: "/catalog", Bulkhead: "catalog", Priority: "critical",
				Timeout: 250 * time.Millisecond, LeaseTTL: 90 * time.Second,
				Upstream: envoy.Endpoint{Host: "catalog", Port: 80}},
			{Name: "plain", Prefix: "/plain", Unguarded: true, Upstream: envoy.Endpoint{Host: "::1", Port: 8081}},
			{Name: "root", Prefix: "/", Upstream: envoy.Endpoint{Host: "::1", Port: 8080}},
		},
	}
	single := custom
	single.SingleAccessLog = true
	noHeartbeat := envoy.DemoParams()
	noHeartbeat.NoHeartbeat = true
	fast := envoy.DemoParams()
	fast.HeartbeatInterval = 500 * time.Millisecond
	replicas := envoy.DemoParams() // daemon replicas sharing a Redis ledger
	replicas.BulkheadReplicas = []envoy.Endpoint{{Host: "127.0.0.2", Port: 9001}, {Host: "127.0.0.1", Port: 9002}}
	replicasDNS := custom
	replicasDNS.BulkheadReplicas = []envoy.Endpoint{{Host: "bulkhead-2.mesh.svc", Port: 9001}}
	affinity := replicas // each worker on one replica
	affinity.BulkheadAffinity = true
	affinityTLS := mtlsSNI
	affinityTLS.BulkheadReplicas = []envoy.Endpoint{{Host: "127.0.0.2", Port: 9001}}
	affinityTLS.BulkheadAffinity = true
	tcp := envoy.DemoParams() // a database behind a connection bulkhead
	tcp.TCPListeners = []envoy.TCPListener{{Name: "postgres", Port: 15432, Upstream: envoy.Endpoint{Host: "127.0.0.1", Port: 5432}}}
	tcp.NodePriority = "best_effort"
	tcpCustom := custom
	tcpCustom.BulkheadReplicas = []envoy.Endpoint{{Host: "bulkhead-2.mesh.svc", Port: 9001}}
	tcpCustom.NoHeartbeat = true
	tcpCustom.TCPListeners = []envoy.TCPListener{{Name: "redis", Port: 6379, Upstream: envoy.Endpoint{Host: "redis.db.svc", Port: 6379}},
		{Name: "pg", Port: 5432, Upstream: envoy.Endpoint{Host: "::1", Port: 5433}},
		{Name: "pg-plain", Port: 5434, Upstream: envoy.Endpoint{Host: "::1", Port: 5433}, Unguarded: true}}
	critical := envoy.DemoParams() // a critical route of bulkhead orders before its normal one
	orders := critical.Routes[2]
	critical.Routes = append(critical.Routes[:2], envoy.Route{Name: "orders-checkout", Prefix: "/orders/checkout",
		Bulkhead: "orders", Priority: "critical", Shares: true, Upstream: orders.Upstream}, orders)
	sharesReplicas := critical // shares with several replicas: RTDS and LRS on one
	sharesReplicas.BulkheadReplicas = []envoy.Endpoint{{Host: "127.0.0.2", Port: 9001}, {Host: "127.0.0.1", Port: 9002}}
	sharesReplicas.BulkheadTLS = mtlsSNI.BulkheadTLS
	return map[string]envoy.Params{"demo": envoy.DemoParams(), "port zero": zero, "custom": custom, "shares with replicas": sharesReplicas,
		"tcp listener": tcp, "tcp listeners custom": tcpCustom,
		"mtls to an IP": mtls, "tls to a DNS name": tlsDNS, "mtls with SNI": mtlsSNI,
		"single access log": single, "no heartbeat": noHeartbeat, "heartbeat 500ms": fast,
		"replicas": replicas, "replicas by name": replicasDNS, "replicas with affinity": affinity,
		"replicas with affinity and mtls": affinityTLS, "shares with a critical route": critical}
}

func TestCommittedConfigIsCurrent(t *testing.T) {
	want, err := envoy.Render(envoy.DemoParams())
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("front-proxy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("envoy/front-proxy.yaml is stale; regenerate it with `make envoy-config` (go run ./envoy/gen)")
	}
}

// TestRenderedShape checks the lines the design depends on, structurally.
func TestRenderedShape(t *testing.T) {
	for name, p := range paramSets(t) {
		t.Run(name, func(t *testing.T) {
			b, err := envoy.Render(p)
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := yaml.Unmarshal(b, &doc); err != nil {
				t.Fatalf("rendered YAML does not parse: %v\n%s", err, b)
			}
			hcm := dig(t, doc, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config")

			checkAccessLogs(t, p, hcm)

			authz := dig(t, hcm, "http_filters", 0)
			if got := dig(t, authz, "name"); got != "envoy.filters.http.ext_authz" {
				t.Fatalf("first http filter = %v", got)
			}
			cfg := dig(t, authz, "typed_config").(map[string]any)
			if _, ok := cfg["clear_route_cache"]; ok {
				t.Error("ext_authz sets clear_route_cache")
			}
			if cfg["failure_mode_allow"] != p.FailureModeAllow || cfg["transport_api_version"] != "V3" {
				t.Errorf("ext_authz config = %v", cfg)
			}
			// The Check names its node, as the access-log streams do.
			md := dig(t, cfg, "grpc_service", "initial_metadata").([]any)
			wantNode := p.NodeID
			if wantNode == "" {
				wantNode = envoy.DefaultNodeID
			}
			if len(md) != 1 || dig(t, md[0], "key") != "x-bulkhead-node" || dig(t, md[0], "value") != wantNode ||
				dig(t, doc, "node", "id") != wantNode {
				t.Errorf("ext_authz initial_metadata = %v, node.id %v; want x-bulkhead-node: %s", md, dig(t, doc, "node", "id"), wantNode)
			}
			if got := dig(t, hcm, "http_filters", 1, "name"); got != "envoy.filters.http.router" {
				t.Errorf("last http filter = %v", got)
			}

			all := dig(t, hcm, "route_config", "virtual_hosts", 0, "routes").([]any)
			shares := checkShares(t, p, doc, all)
			routes := make([]any, 0, len(all))
			for i := 0; i < len(all); i++ {
				routes = append(routes, all[i])
				if r := p.Routes[len(routes)-1]; r.Shares && !r.Unguarded {
					i++ // its share route, checked by checkShares
				}
			}
			if len(routes) != len(p.Routes) {
				t.Fatalf("%d routes, want %d", len(routes), len(p.Routes))
			}
			for i, r := range p.Routes {
				if got := dig(t, routes[i], "route", "cluster"); got != r.Name {
					t.Errorf("route %d cluster = %v, want %s", i, got, r.Name)
				}
				if got, _ := routes[i].(map[string]any)["route"].(map[string]any)["timeout"].(string); (got != "") != (r.Timeout != 0) ||
					r.Timeout != 0 && got != strconv.FormatFloat(r.Timeout.Seconds(), 'f', -1, 64)+"s" {
					t.Errorf("route %d timeout = %q, want %v", i, got, r.Timeout)
				}
				per := dig(t, routes[i], "typed_per_filter_config", "envoy.filters.http.ext_authz").(map[string]any)
				if r.Unguarded {
					if per["disabled"] != true || per["@type"] != "type.googleapis.com/envoy.config.route.v3.FilterConfig" {
						t.Errorf("unguarded route %d: %v", i, per)
					}
					continue
				}
				ext := dig(t, per, "check_settings", "context_extensions").(map[string]any)
				if ext["bulkhead"] != r.BulkheadName() {
					t.Errorf("route %d bulkhead = %v, want %s", i, ext["bulkhead"], r.BulkheadName())
				}
				if got, _ := ext["priority"].(string); got != r.Priority {
					t.Errorf("route %d priority = %q, want %q", i, got, r.Priority)
				}
				if got, _ := ext["lease_ttl"].(string); (got != "") != (r.LeaseTTL != 0) || r.LeaseTTL != 0 && got != r.LeaseTTL.String() {
					t.Errorf("route %d lease_ttl = %q, want %v", i, got, r.LeaseTTL)
				}
			}

			clusters := dig(t, doc, "static_resources", "clusters").([]any)
			bulkheads := 1 // the bulkhead cluster, and with affinity its replicas'
			if p.BulkheadAffinity {
				bulkheads = 2
			}
			if p.SharesOn() && p.SharesXDSCluster() != envoy.BulkheadClusterName {
				bulkheads++ // bulkhead_xds, checked by checkShares
			}
			if len(clusters) != bulkheads+len(p.Routes)+shares+len(p.TCPListeners) {
				t.Fatalf("%d clusters, want %d", len(clusters), bulkheads+len(p.Routes)+shares+len(p.TCPListeners))
			}
			checkTCPListeners(t, p, doc, clusters[bulkheads+len(p.Routes)+shares:])
			bh := clusters[0]
			if p.BulkheadAffinity {
				checkAffinity(t, p, doc, bh, clusters[1])
				return
			}
			if dig(t, bh, "name") != envoy.BulkheadClusterName {
				t.Fatalf("first cluster = %v", dig(t, bh, "name"))
			}
			dig(t, bh, "typed_extension_protocol_options", "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
				"explicit_http_config", "http2_protocol_options")
			if got := dig(t, bh, "circuit_breakers", "thresholds", 0, "max_requests").(int); got <= 1024 {
				t.Errorf("bulkhead max_requests = %d, want far above 1024", got)
			}
			eps := dig(t, bh, "load_assignment", "endpoints", 0, "lb_endpoints").([]any)
			want := p.BulkheadEndpoints()
			if len(eps) != len(want) {
				t.Fatalf("bulkhead cluster: %d endpoints, want %d", len(eps), len(want))
			}
			for i, e := range want {
				sa := dig(t, eps[i], "endpoint", "address", "socket_address")
				if dig(t, sa, "address") != e.Host || dig(t, sa, "port_value") != e.Port {
					t.Errorf("bulkhead endpoint %d = %v, want %s", i, sa, e)
				}
			}
			checkUpstreamTLS(t, p, bh.(map[string]any))
		})
	}
}

// checkAccessLogs checks the connection manager's periodic log and access
// loggers: the release logger (unbuffered, end entries) and, with
// heartbeats on and not SingleAccessLog, the heartbeat logger (periodic
// entries only, batched), each skipping AccessLogExcludeHeader's requests.
func checkAccessLogs(t *testing.T, p envoy.Params, hcm any) {
	t.Helper()
	opts, periodicLog := hcm.(map[string]any)["access_log_options"]
	if periodicLog == p.NoHeartbeat {
		t.Errorf("access_log_options present = %v, NoHeartbeat = %v", periodicLog, p.NoHeartbeat)
	}
	interval := p.HeartbeatInterval
	if interval == 0 {
		interval = time.Second
	}
	if periodicLog && dig(t, opts, "access_log_flush_interval") != protoDuration(interval) {
		t.Errorf("access_log_flush_interval = %v, want %v", dig(t, opts, "access_log_flush_interval"), interval)
	}
	logs := dig(t, hcm, "access_log").([]any)
	split := !p.NoHeartbeat && !p.SingleAccessLog
	if want := map[bool]int{false: 1, true: 2}[split]; len(logs) != want {
		t.Fatalf("%d access loggers, want %d", len(logs), want)
	}
	for i, als := range logs {
		heartbeat := i == 1
		if got := dig(t, als, "name"); got != "envoy.access_loggers.http_grpc" {
			t.Errorf("access log %d = %v", i, got)
		}
		common := dig(t, als, "typed_config", "common_config")
		want := map[string]any{"log_name": "bulkhead", "transport_api_version": "V3", "buffer_size_bytes": 0}
		if heartbeat {
			want["log_name"], want["buffer_size_bytes"] = "bulkhead-heartbeat", 16384
			want["buffer_flush_interval"] = protoDuration(interval / 4)
		} else if _, ok := common.(map[string]any)["buffer_flush_interval"]; ok {
			t.Error("the release logger sets buffer_flush_interval")
		}
		for key, want := range want {
			if got := dig(t, common, key); got != want {
				t.Errorf("access log %d %s = %v, want %v", i, key, got, want)
			}
		}
		if got := dig(t, common, "grpc_service", "envoy_grpc", "cluster_name"); got != "bulkhead" {
			t.Errorf("access log %d cluster = %v", i, got)
		}
		// The filter: the permit's presence, log types (split form), header
		// (AccessLogExcludeHeader).
		var filters []any
		if f, ok := als.(map[string]any)["filter"]; ok {
			if and, ok := f.(map[string]any)["and_filter"]; ok {
				filters = dig(t, and, "filters").([]any)
			} else {
				filters = []any{f}
			}
		}
		var types, headers, permits []any
		for _, f := range filters {
			if lt, ok := f.(map[string]any)["log_type_filter"]; ok {
				types = append(types, lt)
			}
			if hf, ok := f.(map[string]any)["header_filter"]; ok {
				headers = append(headers, hf)
			}
			if mf, ok := f.(map[string]any)["metadata_filter"]; ok {
				permits = append(permits, mf)
			}
		}
		if len(types)+len(headers)+len(permits) != len(filters) {
			t.Errorf("access log %d: unexpected filters %v", i, filters)
		}
		// Only entries that carry a permit are logged.
		if len(permits) != 1 {
			t.Errorf("access log %d: permit filters %v, want one", i, permits)
		} else {
			checkPermitFilter(t, fmt.Sprintf("access log %d", i), permits[0], permit.MetadataNamespace)
		}
		if wantHeader := p.AccessLogExcludeHeader != ""; (len(headers) == 1) != wantHeader || len(headers) > 1 {
			t.Errorf("access log %d header filters = %v, want one: %v", i, headers, wantHeader)
		} else if wantHeader && (dig(t, headers[0], "header", "name") != p.AccessLogExcludeHeader ||
			dig(t, headers[0], "header", "invert_match") != true) {
			t.Errorf("access log %d header filter = %v", i, headers[0])
		}
		if !split {
			if len(types) != 0 {
				t.Errorf("single access log filters log types: %v", types)
			}
			continue
		}
		if len(types) != 1 {
			t.Fatalf("access log %d: log type filters %v, want one", i, types)
		}
		lt := types[0].(map[string]any)
		if got := dig(t, lt, "types").([]any); len(got) != 1 || got[0] != "DownstreamPeriodic" {
			t.Errorf("access log %d log types = %v", i, got)
		}
		if exclude, _ := lt["exclude"].(bool); exclude == heartbeat {
			t.Errorf("access log %d exclude = %v: the release logger excludes periodic entries, the heartbeat logger takes only them", i, exclude)
		}
	}
}

func protoDuration(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// checkUpstreamTLS checks the bulkhead cluster's transport socket: present
// exactly with BulkheadTLS, with the CA, ALPN h2, the name checked (DNS name
// with SNI, or the IP address without) and the client certificate for mTLS.
func checkUpstreamTLS(t *testing.T, p envoy.Params, cluster map[string]any) {
	t.Helper()
	ts, ok := cluster["transport_socket"]
	if ok != (p.BulkheadTLS != nil) {
		t.Fatalf("bulkhead transport_socket present = %v, BulkheadTLS = %+v", ok, p.BulkheadTLS)
	}
	if !ok {
		return
	}
	want := *p.BulkheadTLS
	if dig(t, ts, "name") != "envoy.transport_sockets.tls" ||
		dig(t, ts, "typed_config", "@type") != "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext" {
		t.Errorf("transport_socket = %v", ts)
	}
	ctx := dig(t, ts, "typed_config").(map[string]any)
	wantSNI, sanType, san := want.ServerName, "DNS", want.ServerName
	if wantSNI == "" && net.ParseIP(p.Bulkhead.Host) == nil {
		wantSNI, san = p.Bulkhead.Host, p.Bulkhead.Host
	}
	if wantSNI == "" {
		sanType, san = "IP_ADDRESS", p.Bulkhead.Host
	}
	if got, _ := ctx["sni"].(string); got != wantSNI {
		t.Errorf("sni = %q, want %q", got, wantSNI)
	}
	common := dig(t, ctx, "common_tls_context")
	if alpn := dig(t, common, "alpn_protocols").([]any); len(alpn) != 1 || alpn[0] != "h2" {
		t.Errorf("alpn_protocols = %v, want [h2]", alpn)
	}
	if got := dig(t, common, "validation_context", "trusted_ca", "filename"); got != want.CAFile {
		t.Errorf("trusted_ca = %v, want %s", got, want.CAFile)
	}
	m := dig(t, common, "validation_context", "match_typed_subject_alt_names", 0)
	if dig(t, m, "san_type") != sanType || dig(t, m, "matcher", "exact") != san {
		t.Errorf("SAN match = %v, want %s %s", m, sanType, san)
	}
	certs, hasCert := common.(map[string]any)["tls_certificates"]
	if hasCert != (want.CertFile != "") {
		t.Fatalf("tls_certificates present = %v, CertFile %q", hasCert, want.CertFile)
	}
	if hasCert && (dig(t, certs, 0, "certificate_chain", "filename") != want.CertFile ||
		dig(t, certs, 0, "private_key", "filename") != want.KeyFile) {
		t.Errorf("tls_certificates = %v", certs)
	}
}

func TestRenderRejects(t *testing.T) {
	good := envoy.DemoParams
	tests := []struct {
		name   string
		mutate func(*envoy.Params)
		want   string // substring of the error
	}{
		{"no routes", func(p *envoy.Params) { p.Routes = nil }, "Routes"},
		{"no bulkhead endpoint", func(p *envoy.Params) { p.Bulkhead = envoy.Endpoint{} }, "Bulkhead.Host"},
		{"bulkhead port 0", func(p *envoy.Params) { p.Bulkhead.Port = 0 }, "Bulkhead.Port"},
		{"listener port", func(p *envoy.Params) { p.ListenerPort = 70000 }, "ListenerPort"},
		{"admin address", func(p *envoy.Params) { p.AdminAddress = "localhost" }, "AdminAddress"},
		{"route name", func(p *envoy.Params) { p.Routes[0].Name = "Catalog" }, "Routes[0].Name"},
		{"reserved name", func(p *envoy.Params) { p.Routes[0].Name = "bulkhead" }, "reserved"},
		{"duplicate name", func(p *envoy.Params) { p.Routes[1].Name = "catalog" }, "duplicate"},
		{"prefix", func(p *envoy.Params) { p.Routes[0].Prefix = "catalog" }, "Prefix"},
		{"quote in prefix", func(p *envoy.Params) { p.Routes[0].Prefix = `/a"b` }, "Prefix"},
		{"priority", func(p *envoy.Params) { p.Routes[0].Priority = "urgent" }, "Priority"},
		{"upstream host", func(p *envoy.Params) { p.Routes[2].Upstream.Host = "a b" }, "Routes[2].Upstream.Host"},
		{"timeout", func(p *envoy.Params) { p.ExtAuthzTimeout = -time.Second }, "ExtAuthzTimeout"},
		{"sub-millisecond timeout", func(p *envoy.Params) { p.ExtAuthzTimeout = 1500 * time.Microsecond }, "ExtAuthzTimeout"},
		{"status", func(p *envoy.Params) { p.StatusOnError = 700 }, "StatusOnError"},
		{"route timeout", func(p *envoy.Params) { p.Routes[0].Timeout = -time.Second }, "Routes[0].Timeout"},
		{"sub-millisecond route timeout", func(p *envoy.Params) { p.Routes[1].Timeout = time.Microsecond }, "Routes[1].Timeout"},
		{"route lease", func(p *envoy.Params) { p.Routes[2].LeaseTTL = 1500 * time.Microsecond }, "Routes[2].LeaseTTL"},
		{"lease on an unguarded route", func(p *envoy.Params) { p.Routes[0].Unguarded, p.Routes[0].LeaseTTL = true, time.Second }, "Unguarded"},
		{"header", func(p *envoy.Params) { p.AccessLogExcludeHeader = "X-Upper" }, "AccessLogExcludeHeader"},
		{"TLS without a CA", func(p *envoy.Params) { p.BulkheadTLS = &envoy.UpstreamTLS{} }, "BulkheadTLS.CAFile"},
		{"TLS cert without key", func(p *envoy.Params) { p.BulkheadTLS = &envoy.UpstreamTLS{CAFile: "ca", CertFile: "c"} }, "BulkheadTLS.CertFile"},
		{"TLS key without cert", func(p *envoy.Params) { p.BulkheadTLS = &envoy.UpstreamTLS{CAFile: "ca", KeyFile: "k"} }, "BulkheadTLS.KeyFile"},
		{"SNI an IP", func(p *envoy.Params) { p.BulkheadTLS = &envoy.UpstreamTLS{CAFile: "ca", ServerName: "10.0.0.1"} }, "BulkheadTLS.ServerName"},
		{"SNI not a name", func(p *envoy.Params) { p.BulkheadTLS = &envoy.UpstreamTLS{CAFile: "ca", ServerName: "a b"} }, "BulkheadTLS.ServerName"},
		{"newline in a path", func(p *envoy.Params) { p.BulkheadTLS = &envoy.UpstreamTLS{CAFile: "ca\nx"} }, "BulkheadTLS.CAFile"},
		{"replica host", func(p *envoy.Params) { p.BulkheadReplicas = []envoy.Endpoint{{Host: "a b", Port: 1}} }, "BulkheadReplicas[0].Host"},
		{"replica port", func(p *envoy.Params) { p.BulkheadReplicas = []envoy.Endpoint{{Host: "127.0.0.2"}} }, "BulkheadReplicas[0].Port"},
		{"replica twice", func(p *envoy.Params) { p.BulkheadReplicas = []envoy.Endpoint{p.Bulkhead} }, "duplicate endpoint"},
		{"replicas IP and name", func(p *envoy.Params) { p.BulkheadReplicas = []envoy.Endpoint{{Host: "bulkhead-2", Port: 9001}} }, "one discovery type"},
		{"replicas on IPs, TLS without a name", func(p *envoy.Params) {
			p.BulkheadReplicas = []envoy.Endpoint{{Host: "127.0.0.2", Port: 9001}}
			p.BulkheadTLS = &envoy.UpstreamTLS{CAFile: "ca"}
		}, "BulkheadTLS.ServerName"},
		{"replicas by name, TLS without a name", func(p *envoy.Params) {
			p.Bulkhead = envoy.Endpoint{Host: "bulkhead-1.test", Port: 9001}
			p.BulkheadReplicas = []envoy.Endpoint{{Host: "bulkhead-2.test", Port: 9001}}
			p.BulkheadTLS = &envoy.UpstreamTLS{CAFile: "ca"}
		}, "BulkheadTLS.ServerName"},
		{"tcp listener name", func(p *envoy.Params) {
			p.TCPListeners = []envoy.TCPListener{{Name: "PG", Port: 1, Upstream: p.Bulkhead}}
		}, "TCPListeners[0].Name"},
		{"tcp listener named as a route", func(p *envoy.Params) {
			p.TCPListeners = []envoy.TCPListener{{Name: "catalog", Port: 1, Upstream: p.Bulkhead}}
		}, "TCPListeners[0].Name \"catalog\": duplicate"},
		{"tcp listener port 0", func(p *envoy.Params) { p.TCPListeners = []envoy.TCPListener{{Name: "pg", Upstream: p.Bulkhead}} }, "TCPListeners[0].Port"},
		{"tcp listener on the http port", func(p *envoy.Params) {
			p.TCPListeners = []envoy.TCPListener{{Name: "pg", Port: p.ListenerPort, Upstream: p.Bulkhead}}
		}, "used by another listener"},
		{"tcp upstream", func(p *envoy.Params) { p.TCPListeners = []envoy.TCPListener{{Name: "pg", Port: 1}} }, "TCPListeners[0].Upstream.Host"},
		{"node priority", func(p *envoy.Params) { p.NodePriority = "urgent" }, "NodePriority"},
		{"every problem at once", func(p *envoy.Params) { p.AdminPort = -1; p.StatusOnError = 1 }, "AdminPort"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good()
			tt.mutate(&p)
			_, err := envoy.Render(p)
			if !errors.Is(err, envoy.ErrInvalidParams) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Render error = %v, want ErrInvalidParams mentioning %q", err, tt.want)
			}
		})
	}
}

// TestEnvoyValidates runs `envoy --mode validate` on every param set.
func TestEnvoyValidates(t *testing.T) {
	bin := envoyproctest.Binary(t)
	dir := t.TempDir()
	for name, p := range paramSets(t) {
		t.Run(name, func(t *testing.T) {
			b, err := envoy.Render(p)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.CommandContext(t.Context(), bin, "--mode", "validate", "--disable-hot-restart",
				"-l", "warning", "-c", path).CombinedOutput()
			if err != nil {
				t.Fatalf("envoy --mode validate: %v\n%s\nconfig:\n%s", err, out, b)
			}
		})
	}
}

// dig walks v by map keys and slice indexes, failing the test on a miss.
func dig(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, step := range path {
		switch k := step.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %q: not a map: %v", k, v)
			}
			if v, ok = m[k]; !ok {
				t.Fatalf("missing key %q in %v", k, m)
			}
		case int:
			s, ok := v.([]any)
			if !ok || k >= len(s) {
				t.Fatalf("at [%d]: not a long enough list: %v", k, v)
			}
			v = s[k]
		}
	}
	return v
}

// Render leaves the caller's BulkheadTLS as it was (defaults go to a copy).
func TestRenderKeepsCallersTLS(t *testing.T) {
	p := envoy.DemoParams()
	p.Bulkhead.Host = "bulkhead.mesh.svc"
	tls := &envoy.UpstreamTLS{CAFile: "/ca.crt"}
	p.BulkheadTLS = tls
	if _, err := envoy.Render(p); err != nil {
		t.Fatal(err)
	}
	if tls.ServerName != "" {
		t.Errorf("Render set the caller's ServerName to %q", tls.ServerName)
	}
}

// checkTCPListeners checks the listeners after the HTTP one: network
// ext_authz (with the node's labels) then the TCP proxy, whose access log
// streams unbuffered to the bulkhead cluster with periodic entries; and
// their clusters.
// checkAffinity checks the bulkhead cluster bh and the replicas' cluster
// rc of BulkheadAffinity: bh's one endpoint is the internal listener, whose
// TCP proxy goes to rc, which lists the replicas, health-checks them, closes
// a failing one's connections and carries the TLS.
func checkAffinity(t *testing.T, p envoy.Params, doc map[string]any, bh, rc any) {
	t.Helper()
	eps := dig(t, bh, "load_assignment", "endpoints", 0, "lb_endpoints").([]any)
	if len(eps) != 1 || dig(t, eps[0], "endpoint", "address", "envoy_internal_address", "server_listener_name") != envoy.BulkheadAffinityListener {
		t.Fatalf("bulkhead cluster endpoints = %v, want the internal listener %s alone", eps, envoy.BulkheadAffinityListener)
	}
	if dig(t, bh, "type") != "STATIC" || bh.(map[string]any)["transport_socket"] != nil || bh.(map[string]any)["health_checks"] != nil {
		t.Errorf("bulkhead cluster = %v, want STATIC, no TLS and no health checks (its replicas' cluster has them)", bh)
	}
	if dig(t, rc, "name") != envoy.BulkheadReplicasCluster || dig(t, rc, "close_connections_on_host_health_failure") != true {
		t.Errorf("replicas cluster = %v", rc)
	}
	dig(t, rc, "health_checks", 0, "grpc_health_check")
	reps := dig(t, rc, "load_assignment", "endpoints", 0, "lb_endpoints").([]any)
	want := p.BulkheadEndpoints()
	if len(reps) != len(want) {
		t.Fatalf("replicas cluster: %d endpoints, want %d", len(reps), len(want))
	}
	for i, e := range want {
		sa := dig(t, reps[i], "endpoint", "address", "socket_address")
		if dig(t, sa, "address") != e.Host || dig(t, sa, "port_value") != e.Port {
			t.Errorf("replica endpoint %d = %v, want %s", i, sa, e)
		}
	}
	checkUpstreamTLS(t, p, rc.(map[string]any))
	listeners := dig(t, doc, "static_resources", "listeners").([]any)
	il := listeners[len(listeners)-1]
	if dig(t, il, "name") != envoy.BulkheadAffinityListener ||
		dig(t, il, "filter_chains", 0, "filters", 0, "typed_config", "cluster") != envoy.BulkheadReplicasCluster {
		t.Errorf("last listener = %v, want the internal listener proxying to %s", il, envoy.BulkheadReplicasCluster)
	}
	if dig(t, doc, "bootstrap_extensions", 0, "name") != "envoy.bootstrap.internal_listener" {
		t.Errorf("bootstrap_extensions = %v", doc["bootstrap_extensions"])
	}
}

func checkTCPListeners(t *testing.T, p envoy.Params, doc map[string]any, clusters []any) {
	t.Helper()
	listeners := dig(t, doc, "static_resources", "listeners").([]any)
	if p.BulkheadAffinity {
		listeners = listeners[:len(listeners)-1] // the internal listener, last (checkAffinity)
	}
	if len(listeners) != 1+len(p.TCPListeners) {
		t.Fatalf("%d listeners, want %d", len(listeners), 1+len(p.TCPListeners))
	}
	md, _ := dig(t, doc, "node").(map[string]any)["metadata"].(map[string]any)
	labels, _ := md["labels"].(map[string]any)
	if got, _ := labels["bulkhead_priority"].(string); got != p.NodePriority {
		t.Errorf("node label bulkhead_priority = %q, want %q", got, p.NodePriority)
	}
	for i, l := range p.TCPListeners {
		ln := listeners[1+i]
		if dig(t, ln, "address", "socket_address", "port_value") != l.Port {
			t.Errorf("tcp listener %d port = %v, want %d", i, dig(t, ln, "address", "socket_address", "port_value"), l.Port)
		}
		if l.Unguarded {
			proxy := dig(t, ln, "filter_chains", 0, "filters", 0)
			if dig(t, proxy, "name") != "envoy.filters.network.tcp_proxy" || dig(t, proxy, "typed_config").(map[string]any)["access_log"] != nil {
				t.Errorf("unguarded tcp listener %d: %v", i, proxy)
			}
			continue
		}
		authz := dig(t, ln, "filter_chains", 0, "filters", 0)
		if dig(t, authz, "name") != "envoy.filters.network.ext_authz" ||
			dig(t, authz, "typed_config", "bootstrap_metadata_labels_key") != "labels" ||
			dig(t, authz, "typed_config", "grpc_service", "envoy_grpc", "cluster_name") != envoy.BulkheadClusterName {
			t.Errorf("tcp listener %d: first filter %v", i, authz)
		}
		proxy := dig(t, ln, "filter_chains", 0, "filters", 1, "typed_config")
		if dig(t, proxy, "cluster") != l.Name || dig(t, clusters[i], "name") != l.Name {
			t.Errorf("tcp listener %d: proxy to %v, cluster %v; want %s", i, dig(t, proxy, "cluster"), dig(t, clusters[i], "name"), l.Name)
		}
		logger := dig(t, proxy, "access_log", 0)
		if dig(t, logger, "name") != "envoy.access_loggers.tcp_grpc" || dig(t, logger, "typed_config", "common_config", "buffer_size_bytes") != 0 {
			t.Errorf("tcp listener %d: access log %v", i, logger)
		}
		checkPermitFilter(t, fmt.Sprintf("tcp listener %d", i), dig(t, logger, "filter", "metadata_filter"), permit.MetadataNamespaceOf(true))
		if dig(t, proxy, "upstream_connect_mode") != "ON_DOWNSTREAM_DATA" {
			t.Errorf("tcp listener %d: upstream_connect_mode %v: the upstream would see connections before their Check", i, dig(t, proxy, "upstream_connect_mode"))
		}
		_, periodic := proxy.(map[string]any)["access_log_options"]
		if periodic == p.NoHeartbeat {
			t.Errorf("tcp listener %d: access_log_options present %v with NoHeartbeat %v", i, periodic, p.NoHeartbeat)
		}
	}
}

// checkPermitFilter checks an access log's metadata filter: log only what
// carries a permit token in namespace ns.
func checkPermitFilter(t *testing.T, where string, f any, ns string) {
	t.Helper()
	m := dig(t, f, "matcher")
	path, _ := dig(t, m, "path").([]any)
	if dig(t, m, "filter") != ns || len(path) != 1 || dig(t, path[0], "key") != permit.MetadataToken ||
		dig(t, m, "value", "present_match") != true || dig(t, f, "match_if_key_not_found") != false {
		t.Errorf("%s: permit filter %v, want %s.%s present, and nothing logged without it", where, f, ns, permit.MetadataToken)
	}
}

// checkShares checks the route pairs of the routes with Shares (the strict
// route gated by its runtime key, then the share route to its share
// cluster, ext_authz disabled, with the share timeout), their clusters
// (circuit breaker 0 until the daemon's layer), and the runtime layer and
// load reports when any route has one. It returns the number of pairs.
func checkShares(t *testing.T, p envoy.Params, doc map[string]any, routes []any) int {
	t.Helper()
	pairs, j := 0, 0
	clusters := map[string]any{}
	for _, c := range dig(t, doc, "static_resources", "clusters").([]any) {
		clusters[dig(t, c, "name").(string)] = c
	}
	for i, r := range p.Routes {
		if j >= len(routes) {
			t.Fatalf("route %d: missing", i)
		}
		if !r.Shares || r.Unguarded {
			if _, gated := routes[j].(map[string]any)["match"].(map[string]any)["runtime_fraction"]; gated {
				t.Errorf("route %d has no share route but is gated by a runtime key", i)
			}
			j++
			continue
		}
		pairs++
		wantCluster, wantKey := shares.DefaultCluster(r.BulkheadName()), shares.StrictKey(r.BulkheadName())
		if r.Priority == "critical" { // its own share cluster and key: its share is held at priority critical
			wantCluster, wantKey = shares.CriticalCluster(wantCluster), shares.CriticalStrictKey(r.BulkheadName())
		}
		if r.SharesCluster() != wantCluster || r.StrictKey() != wantKey {
			t.Errorf("route %d (priority %q): share cluster %s, strict key %s; want %s, %s", i, r.Priority, r.SharesCluster(), r.StrictKey(), wantCluster, wantKey)
		}
		if got := dig(t, routes[j], "match", "runtime_fraction", "runtime_key"); got != r.StrictKey() {
			t.Errorf("route %d strict half: runtime key %v, want %s", i, got, r.StrictKey())
		}
		if got := dig(t, routes[j], "match", "runtime_fraction", "default_value", "numerator"); got != 100 {
			t.Errorf("route %d strict half: default %v%%, want 100%% (strict without the daemon's layer)", i, got)
		}
		share := routes[j+1]
		if dig(t, share, "match", "prefix") != r.Prefix || dig(t, share, "route", "cluster") != r.SharesCluster() {
			t.Errorf("route %d share half = %v", i, share)
		}
		// Envoy's generic FilterConfig, not ExtAuthzPerRoute's disabled: the
		// share route's filter chain leaves ext_authz out rather than
		// creating it idle for each request.
		if off := dig(t, share, "typed_per_filter_config", "envoy.filters.http.ext_authz"); dig(t, off, "disabled") != true ||
			dig(t, off, "@type") != "type.googleapis.com/envoy.config.route.v3.FilterConfig" {
			t.Errorf("route %d share half: ext_authz %v, want disabled by a FilterConfig", i, off)
		}
		want := p.SharesMaxRequest
		if want == 0 {
			want = envoy.DefaultSharesMaxRequest
		}
		if got := dig(t, share, "route", "timeout"); got != strconv.FormatFloat(want.Seconds(), 'f', -1, 64)+"s" {
			t.Errorf("route %d share half: timeout %v, want %v", i, got, want)
		}
		c, ok := clusters[r.SharesCluster()]
		if !ok {
			t.Fatalf("route %d: no cluster %s", i, r.SharesCluster())
		}
		if got := dig(t, c, "circuit_breakers", "thresholds", 0, "max_requests"); got != 0 {
			t.Errorf("share cluster %s: static max_requests %v, want 0", r.SharesCluster(), got)
		}
		j += 2
	}
	_, runtime := doc["layered_runtime"]
	_, lrs := doc["cluster_manager"]
	if runtime != (pairs > 0) || lrs != (pairs > 0) {
		t.Errorf("%d share routes: layered_runtime %v, cluster_manager (LRS) %v", pairs, runtime, lrs)
	}
	if pairs > 0 {
		// RTDS and LRS on one cluster: the bulkhead cluster, or with several
		// replicas bulkhead_xds, whose replicas are priorities in order
		// (both streams reach the first healthy one).
		xds := envoy.BulkheadClusterName
		if len(p.BulkheadReplicas) > 0 && !p.BulkheadAffinity {
			xds = "bulkhead_xds"
		}
		layers := dig(t, doc, "layered_runtime", "layers").([]any)
		if dig(t, layers[1], "rtds_layer", "name") != "bulkhead" ||
			dig(t, layers[1], "rtds_layer", "rtds_config", "api_config_source", "grpc_services", 0, "envoy_grpc", "cluster_name") != xds {
			t.Errorf("runtime layers = %v, want RTDS on %s", layers, xds)
		}
		if got := dig(t, doc, "cluster_manager", "load_stats_config", "grpc_services", 0, "envoy_grpc", "cluster_name"); got != xds {
			t.Errorf("LRS on %v, want %s", got, xds)
		}
		if xds != envoy.BulkheadClusterName {
			c, ok := clusters[xds]
			if !ok {
				t.Fatalf("no cluster %s", xds)
			}
			eps := dig(t, c, "load_assignment", "endpoints").([]any)
			if len(eps) != len(p.BulkheadEndpoints()) {
				t.Fatalf("%s: %d priorities, want one per replica (%d)", xds, len(eps), len(p.BulkheadEndpoints()))
			}
			for i, e := range p.BulkheadEndpoints() {
				prio, _ := eps[i].(map[string]any)["priority"].(int)
				addr := dig(t, eps[i], "lb_endpoints", 0, "endpoint", "address", "socket_address")
				if prio != i || dig(t, addr, "address") != e.Host || dig(t, addr, "port_value") != e.Port {
					t.Errorf("%s endpoint %d: priority %d, %v; want priority %d, %s:%d", xds, i, prio, addr, i, e.Host, e.Port)
				}
			}
			dig(t, c, "health_checks", 0, "grpc_health_check")
			if p.BulkheadTLS != nil {
				dig(t, c, "transport_socket", "typed_config", "common_tls_context")
			}
		}
	}
	return pairs
}
