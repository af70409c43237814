package charts

import (
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
)

// checkSharesPieces checks the snippet's shares pieces against the daemon's
// configuration, decoded into Envoy's API types: with a bulkhead in mode
// shares or auto, the runtime layer the daemon serves (RTDS, named
// shares.DefaultLayer) and the load reports (LRS) on the Bulkhead cluster;
// per such bulkhead a route pair per class (the strict route gated by
// shares.StrictKey, then the share route to its share cluster with ext_authz
// disabled and the timeout shares.max_request_duration) and its share
// cluster (load reports on, circuit breakers at 0). The classes are the
// chart-only shares.classes of values, or the one class of the bulkhead's
// priority (a chart-only key, the class its route sends). The critical
// class's pair has shares.CriticalStrictKey, the critical share cluster
// (shares.CriticalCluster of its shares.cluster) and priority critical; the
// normal class's the bulkhead's priority, normal in place of critical. With
// both classes the critical pair comes first, on /<name>/critical. Each pair
// and share cluster is what envoy/front-proxy.yaml.tmpl renders for a route
// of that bulkhead, prefix and priority (checkTemplatePair). Without a
// bulkhead in shares mode, none of it.
func checkSharesPieces(t *testing.T, s snippet, cfg *config.Config, values map[string]map[string]any) {
	t.Helper()
	want := map[string][]sharesPair{}
	pairs := 0
	for name, b := range cfg.Bulkheads {
		if b.Shares.Mode == shares.Strict || b.Connections != nil {
			continue
		}
		priority, _ := values[name]["priority"].(string)
		classes := []string{"normal"}
		if priority == "critical" {
			classes = []string{"critical"}
		}
		if sh, ok := values[name]["shares"].(map[string]any); ok && sh["classes"] != nil {
			classes = nil
			for _, c := range []string{"critical", "normal"} { // the critical pair first
				if slices.Contains(sh["classes"].([]any), any(c)) {
					classes = append(classes, c)
				}
			}
		}
		for _, c := range classes {
			p := sharesPair{priority: priority, cluster: b.Shares.Cluster, key: shares.StrictKey(name), prefix: "/" + name}
			switch {
			case c == "critical":
				p.priority, p.cluster, p.key = "critical", shares.CriticalCluster(p.cluster), shares.CriticalStrictKey(name)
				if len(classes) > 1 {
					p.prefix = "/" + name + "/critical"
				}
			case p.priority == "critical":
				p.priority = "normal"
			}
			want[name] = append(want[name], p)
			pairs++
		}
	}
	if len(want) == 0 {
		if s.LayeredRuntime != nil || s.ClusterManager != nil || s.SharesRoutes != nil || s.SharesClusters != nil {
			t.Error("snippet has shares pieces, but no bulkhead is in shares.mode shares or auto")
		}
		return
	}
	if len(s.SharesRoutes) != len(want) || len(s.SharesClusters) != pairs {
		t.Fatalf("snippet: route pairs of %d bulkheads and %d share clusters, want %d and one per class of each (%d)",
			len(s.SharesRoutes), len(s.SharesClusters), len(want), pairs)
	}
	bulkheadCluster := s.Clusters[0].(map[string]any)["name"].(string)
	var rt bootstrapv3.LayeredRuntime
	unmarshalProto(t, s.LayeredRuntime, &rt)
	rtds := 0
	for _, l := range rt.GetLayers() {
		if r := l.GetRtdsLayer(); r != nil {
			rtds++
			src := r.GetRtdsConfig().GetApiConfigSource()
			if r.GetName() != shares.DefaultLayer || len(src.GetGrpcServices()) != 1 ||
				src.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != bulkheadCluster {
				t.Errorf("rtds layer %v: want %q from cluster %q", r, shares.DefaultLayer, bulkheadCluster)
			}
		}
	}
	if rtds != 1 {
		t.Errorf("layered_runtime has %d RTDS layers, want 1", rtds)
	}
	var cm bootstrapv3.ClusterManager
	unmarshalProto(t, s.ClusterManager, &cm)
	if lrs := cm.GetLoadStatsConfig().GetGrpcServices(); len(lrs) != 1 || lrs[0].GetEnvoyGrpc().GetClusterName() != bulkheadCluster {
		t.Errorf("load_stats_config %v: want LRS to cluster %q", cm.GetLoadStatsConfig(), bulkheadCluster)
	}
	for name, ws := range want {
		routes := s.SharesRoutes[name]
		if len(routes) != 2*len(ws) {
			t.Fatalf("%s: %d routes, want the strict and the share route of each class (%d)", name, len(routes), len(ws))
		}
		for i, w := range ws {
			checkSnippetPair(t, name, w, cfg, routes[2*i:2*i+2])
		}
	}
	got := map[string]*clusterv3.Cluster{}
	for _, c := range s.SharesClusters {
		var cl clusterv3.Cluster
		unmarshalProto(t, c, &cl)
		got[cl.GetName()] = &cl
		th := cl.GetCircuitBreakers().GetThresholds()
		if cl.GetLrsServer().GetSelf() == nil || len(th) != 2 || th[0].GetMaxRequests() == nil || th[0].GetMaxRequests().GetValue() != 0 ||
			th[1].GetMaxRequests() == nil || th[1].GetMaxRequests().GetValue() != 0 {
			t.Errorf("share cluster %s: want lrs_server self and max_requests 0 at both priorities (the daemon's layer sets %s)",
				cl.GetName(), shares.ShareKey(cl.GetName()))
		}
	}
	for name, ws := range want {
		for i, w := range ws {
			if got[w.cluster] == nil {
				t.Errorf("%s: no share cluster %q", name, w.cluster)
				continue
			}
			checkTemplatePair(t, name, w, cfg.Shares.MaxRequestDuration, s.SharesRoutes[name][2*i:2*i+2], got[w.cluster])
		}
	}
}

// checkSnippetPair checks one route pair of bulkhead name in the snippet
// against w, decoded into Envoy's types.
func checkSnippetPair(t *testing.T, name string, w sharesPair, cfg *config.Config, pair []any) {
	t.Helper()
	var strict, share routev3.Route
	unmarshalProto(t, pair[0], &strict)
	unmarshalProto(t, pair[1], &share)
	if strict.GetMatch().GetPrefix() != w.prefix {
		t.Errorf("%s: strict route's prefix %q, want %q", name, strict.GetMatch().GetPrefix(), w.prefix)
	}
	f := strict.GetMatch().GetRuntimeFraction()
	if f.GetRuntimeKey() != w.key || f.GetDefaultValue().GetNumerator() != 100 {
		t.Errorf("%s: strict route's runtime_fraction %v: want key %q, default 100%%", name, f, w.key)
	}
	var per extauthzv3.ExtAuthzPerRoute
	if err := strict.GetTypedPerFilterConfig()["envoy.filters.http.ext_authz"].UnmarshalTo(&per); err != nil ||
		per.GetCheckSettings().GetContextExtensions()["bulkhead"] != name || per.GetCheckSettings().GetContextExtensions()["priority"] != w.priority {
		t.Errorf("%s: strict route's ext_authz %v (%v): want it to name the bulkhead and priority %q", name, &per, err, w.priority)
	}
	if share.GetMatch().GetPrefix() != strict.GetMatch().GetPrefix() || share.GetMatch().GetRuntimeFraction() != nil {
		t.Errorf("%s: share route match %v, want the strict route's prefix without a runtime fraction", name, share.GetMatch())
	}
	var off routev3.FilterConfig
	if err := share.GetTypedPerFilterConfig()["envoy.filters.http.ext_authz"].UnmarshalTo(&off); err != nil || !off.GetDisabled() {
		t.Errorf("%s: share route's ext_authz %v (%v): want it disabled by a FilterConfig (left out of the filter chain)", name, &off, err)
	}
	if r := share.GetRoute(); r.GetCluster() != w.cluster || r.GetTimeout().AsDuration() != cfg.Shares.MaxRequestDuration {
		t.Errorf("%s: share route to %q, timeout %v: want %q and the daemon's shares.max_request_duration %v",
			name, r.GetCluster(), r.GetTimeout().AsDuration(), w.cluster, cfg.Shares.MaxRequestDuration)
	}
}

// sharesPair is what a shares bulkhead's route pair in the snippet must
// be: the class its strict route sends, its share cluster, the runtime
// key that gates its strict route and the prefix both routes match.
type sharesPair struct{ priority, cluster, key, prefix string }

// checkTemplatePair checks the chart's route pair and share cluster of
// bulkhead name against what envoy.Render writes for one route of that
// bulkhead with w's priority and Shares, decoded into Envoy's types: the
// same routes, with the upstream's cluster (UPSTREAM_CLUSTER in the
// snippet) and the share cluster's name (the template knows only the
// default) taken from the chart, and the template's share cluster's
// lrs_server and circuit breakers (the rest is the upstream's, which the
// snippet leaves to the user).
func checkTemplatePair(t *testing.T, name string, w sharesPair, maxRequest time.Duration, pair []any, cluster *clusterv3.Cluster) {
	t.Helper()
	r := envoy.Route{Name: "upstream", Prefix: w.prefix, Bulkhead: name, Priority: w.priority, Shares: true,
		Upstream: envoy.Endpoint{Host: "127.0.0.1", Port: 1}}
	raw, err := envoy.Render(envoy.Params{Bulkhead: envoy.Endpoint{Host: "127.0.0.1", Port: 9001},
		Routes: []envoy.Route{r}, SharesMaxRequest: maxRequest})
	if err != nil {
		t.Fatalf("%s: envoy.Render: %v", name, err)
	}
	var doc struct {
		StaticResources struct {
			Listeners []struct {
				FilterChains []struct {
					Filters []struct {
						TypedConfig struct {
							RouteConfig struct {
								VirtualHosts []struct {
									Routes []any `json:"routes"`
								} `json:"virtual_hosts"`
							} `json:"route_config"`
						} `json:"typed_config"`
					} `json:"filters"`
				} `json:"filter_chains"`
			} `json:"listeners"`
			Clusters []map[string]any `json:"clusters"`
		} `json:"static_resources"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	tmplRoutes := doc.StaticResources.Listeners[0].FilterChains[0].Filters[0].TypedConfig.RouteConfig.VirtualHosts[0].Routes
	if len(tmplRoutes) != 2 || len(pair) != 2 {
		t.Fatalf("%s: the template renders %d routes for one route with shares, the chart %d: want a pair each", name, len(tmplRoutes), len(pair))
	}
	for i, half := range []string{"strict", "share"} {
		var got, want routev3.Route
		unmarshalProto(t, pair[i], &got)
		unmarshalProto(t, tmplRoutes[i], &want)
		if i == 0 && got.GetRoute().GetCluster() == "UPSTREAM_CLUSTER" {
			got.GetRoute().ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: r.Name}
		}
		if i == 1 {
			if want.GetRoute().GetCluster() != r.SharesCluster() {
				t.Errorf("%s: the template's share route goes to %q, want %q", name, want.GetRoute().GetCluster(), r.SharesCluster())
			}
			want.GetRoute().ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: w.cluster}
		}
		if !proto.Equal(&got, &want) {
			t.Errorf("%s: the chart's %s route differs from the template's for priority %q:\nchart:    %v\ntemplate: %v", name, half, w.priority, &got, &want)
		}
	}
	var tmplCluster clusterv3.Cluster
	for _, c := range doc.StaticResources.Clusters {
		if c["name"] == r.SharesCluster() {
			unmarshalProto(t, c, &tmplCluster)
		}
	}
	want := &clusterv3.Cluster{Name: cluster.GetName(), LrsServer: tmplCluster.GetLrsServer(), CircuitBreakers: tmplCluster.GetCircuitBreakers()}
	if tmplCluster.GetName() == "" || !proto.Equal(cluster, want) {
		t.Errorf("%s: the chart's share cluster differs from the template's %q:\nchart:    %v\ntemplate: %v", name, r.SharesCluster(), cluster, want)
	}
}

// bulkheads.<name>.shares.classes (chart only, never passed to the daemon)
// renders a route pair and a share cluster per class, each checked against
// the template's (checkSharesPieces); without it the bulkhead's priority
// picks the one class.
func TestSharesClasses(t *testing.T) {
	d := newDecoder(t)
	tests := []struct {
		name     string
		priority string
		classes  []string
		clusters []string // the share clusters rendered, in order
	}{
		{"both classes", "", []string{"normal", "critical"}, []string{"orders_shares_critical", "orders_shares"}},
		{"both classes, priority critical", "critical", []string{"critical", "normal"}, []string{"orders_shares_critical", "orders_shares"}},
		{"critical only", "", []string{"critical"}, []string{"orders_shares_critical"}},
		{"priority critical", "critical", nil, []string{"orders_shares_critical"}},
		{"priority best_effort", "best_effort", nil, []string{"orders_shares"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set := []string{"--set", "bulkheads.orders.max_concurrent=20,bulkheads.orders.shares.mode=auto"}
			values := map[string]any{"max_concurrent": 20, "shares": map[string]any{"mode": "auto"}}
			if tc.priority != "" {
				set = append(set, "--set", "bulkheads.orders.priority="+tc.priority)
				values["priority"] = tc.priority
			}
			if tc.classes != nil {
				set = append(set, "--set", "bulkheads.orders.shares.classes={"+strings.Join(tc.classes, ",")+"}")
				var cs []any
				for _, c := range tc.classes {
					cs = append(cs, c)
				}
				values["shares"].(map[string]any)["classes"] = cs
			}
			ms := render(t, "", set...)
			cfg := daemonConfig(t, d, ms) // pkg/config refuses unknown keys: classes must not reach it
			s := renderedSnippet(t, d, ms)
			checkSharesPieces(t, s, cfg, map[string]map[string]any{"orders": values})
			var got []string
			for _, c := range s.SharesClusters {
				got = append(got, c.(map[string]any)["name"].(string))
			}
			if !slices.Equal(got, tc.clusters) {
				t.Errorf("share clusters %v, want %v", got, tc.clusters)
			}
		})
	}
}
