package charts

import (
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"

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
// cluster (load reports on, circuit breakers at 0). Without one, none of it.
func checkSharesPieces(t *testing.T, s snippet, cfg *config.Config) {
	t.Helper()
	want := map[string]string{} // bulkhead: share cluster
	for name, b := range cfg.Bulkheads {
		if b.Shares.Mode != shares.Strict && b.Connections == nil {
			want[name] = b.Shares.Cluster
		}
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
	for name, cluster := range want {
		pair := s.SharesRoutes[name]
		if len(pair) != 2 {
			t.Fatalf("%s: %d routes, want the strict and the share route", name, len(pair))
		}
		var strict, share routev3.Route
		unmarshalProto(t, pair[0], &strict)
		unmarshalProto(t, pair[1], &share)
		f := strict.GetMatch().GetRuntimeFraction()
		if f.GetRuntimeKey() != shares.StrictKey(name) || f.GetDefaultValue().GetNumerator() != 100 {
			t.Errorf("%s: strict route's runtime_fraction %v: want key %q, default 100%%", name, f, shares.StrictKey(name))
		}
		var per extauthzv3.ExtAuthzPerRoute
		if err := strict.GetTypedPerFilterConfig()["envoy.filters.http.ext_authz"].UnmarshalTo(&per); err != nil ||
			per.GetCheckSettings().GetContextExtensions()["bulkhead"] != name {
			t.Errorf("%s: strict route's ext_authz %v (%v): want it to name the bulkhead", name, &per, err)
		}
		if share.GetMatch().GetPrefix() != strict.GetMatch().GetPrefix() || share.GetMatch().GetRuntimeFraction() != nil {
			t.Errorf("%s: share route match %v, want the strict route's prefix without a runtime fraction", name, share.GetMatch())
		}
		per.Reset()
		if err := share.GetTypedPerFilterConfig()["envoy.filters.http.ext_authz"].UnmarshalTo(&per); err != nil || !per.GetDisabled() {
			t.Errorf("%s: share route's ext_authz %v (%v): want it disabled", name, &per, err)
		}
		if r := share.GetRoute(); r.GetCluster() != cluster || r.GetTimeout().AsDuration() != cfg.Shares.MaxRequestDuration {
			t.Errorf("%s: share route to %q, timeout %v: want %q and the daemon's shares.max_request_duration %v",
				name, r.GetCluster(), r.GetTimeout().AsDuration(), cluster, cfg.Shares.MaxRequestDuration)
		}
	}
	got := map[string]bool{}
	for _, c := range s.SharesClusters {
		var cl clusterv3.Cluster
		unmarshalProto(t, c, &cl)
		got[cl.GetName()] = true
		th := cl.GetCircuitBreakers().GetThresholds()
		if cl.GetLrsServer().GetSelf() == nil || len(th) != 2 || th[0].GetMaxRequests() == nil || th[0].GetMaxRequests().GetValue() != 0 ||
			th[1].GetMaxRequests() == nil || th[1].GetMaxRequests().GetValue() != 0 {
			t.Errorf("share cluster %s: want lrs_server self and max_requests 0 at both priorities (the daemon's layer sets %s)",
				cl.GetName(), shares.ShareKey(cl.GetName()))
		}
	}
	for name, cluster := range want {
		if !got[cluster] {
			t.Errorf("%s: no share cluster %q", name, cluster)
		}
	}
}
