package charts

import (
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
// per such bulkhead a route pair (the strict route gated by
// shares.StrictKey, then the share route to its share cluster with ext_authz
// disabled and the timeout shares.max_request_duration) and its share
// cluster (load reports on, circuit breakers at 0); for a bulkhead whose
// priority (a chart-only key of values, the class its route sends) is
// critical, the critical pair: shares.CriticalStrictKey and the critical
// share cluster, shares.CriticalCluster of its shares.cluster. Each pair and
// share cluster is what envoy/front-proxy.yaml.tmpl renders for a route of
// that bulkhead and priority (checkTemplatePair). Without a bulkhead in
// shares mode, none of it.
func checkSharesPieces(t *testing.T, s snippet, cfg *config.Config, values map[string]map[string]any) {
	t.Helper()
	want := map[string]sharesPair{}
	for name, b := range cfg.Bulkheads {
		if b.Shares.Mode == shares.Strict || b.Connections != nil {
			continue
		}
		priority, _ := values[name]["priority"].(string)
		p := sharesPair{priority: priority, cluster: b.Shares.Cluster, key: shares.StrictKey(name)}
		if p.priority == "critical" {
			p.cluster, p.key = shares.CriticalCluster(p.cluster), shares.CriticalStrictKey(name)
		}
		want[name] = p
	}
	if len(want) == 0 {
		if s.LayeredRuntime != nil || s.ClusterManager != nil || s.SharesRoutes != nil || s.SharesClusters != nil {
			t.Error("snippet has shares pieces, but no bulkhead is in shares.mode shares or auto")
		}
		return
	}
	if len(s.SharesRoutes) != len(want) || len(s.SharesClusters) != len(want) {
		t.Fatalf("snippet: %d route pairs and %d share clusters, want one each per bulkhead in shares mode (%d)",
			len(s.SharesRoutes), len(s.SharesClusters), len(want))
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
	for name, w := range want {
		pair := s.SharesRoutes[name]
		if len(pair) != 2 {
			t.Fatalf("%s: %d routes, want the strict and the share route", name, len(pair))
		}
		var strict, share routev3.Route
		unmarshalProto(t, pair[0], &strict)
		unmarshalProto(t, pair[1], &share)
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
		per.Reset()
		if err := share.GetTypedPerFilterConfig()["envoy.filters.http.ext_authz"].UnmarshalTo(&per); err != nil || !per.GetDisabled() {
			t.Errorf("%s: share route's ext_authz %v (%v): want it disabled", name, &per, err)
		}
		if r := share.GetRoute(); r.GetCluster() != w.cluster || r.GetTimeout().AsDuration() != cfg.Shares.MaxRequestDuration {
			t.Errorf("%s: share route to %q, timeout %v: want %q and the daemon's shares.max_request_duration %v",
				name, r.GetCluster(), r.GetTimeout().AsDuration(), w.cluster, cfg.Shares.MaxRequestDuration)
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
	for name, w := range want {
		if got[w.cluster] == nil {
			t.Errorf("%s: no share cluster %q", name, w.cluster)
			continue
		}
		checkTemplatePair(t, name, w, cfg.Shares.MaxRequestDuration, s.SharesRoutes[name], got[w.cluster])
	}
}

// sharesPair is what a shares bulkhead's route pair in the snippet must
// be: the class its strict route sends, its share cluster and the runtime
// key that gates its strict route.
type sharesPair struct{ priority, cluster, key string }

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
	r := envoy.Route{Name: "upstream", Prefix: "/" + name, Bulkhead: name, Priority: w.priority, Shares: true,
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
