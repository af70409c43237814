package charts

import (
	stdjson "encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsgrpcv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// renderedSnippet returns the plain-Envoy snippet of the ConfigMap
// rel-bulkhead-envoy, decoded strictly.
func renderedSnippet(t *testing.T, d decoder, ms []manifest) snippet {
	t.Helper()
	cm := decodeAs[*corev1.ConfigMap](t, d, find(ms, "ConfigMap", "rel-bulkhead-envoy")[0])
	s := snippet{raw: cm.Data["bulkhead-envoy.yaml"]}
	if err := yaml.UnmarshalStrict([]byte(s.raw), &s); err != nil {
		t.Fatalf("snippet: %v\n%s", err, s.raw)
	}
	return s
}

// flushInterval decodes an HTTP connection manager's access_log_options
// (nil: not set, 0) and returns its access_log_flush_interval, checked
// against Envoy's own validation rules.
func flushInterval(t *testing.T, options map[string]any) time.Duration {
	t.Helper()
	if options == nil {
		return 0
	}
	var o hcmv3.HttpConnectionManager_HcmAccessLogOptions
	unmarshalProto(t, options, &o)
	if err := o.ValidateAll(); err != nil {
		t.Errorf("access_log_options %v: %v", options, err)
	}
	return o.GetAccessLogFlushInterval().AsDuration()
}

// patchedHCM decodes the value of an EnvoyFilter NETWORK_FILTER patch into
// the HTTP connection manager it merges, checked against Envoy's own
// validation rules for the fields it sets.
func patchedHCM(t *testing.T, value map[string]any) *hcmv3.HttpConnectionManager {
	t.Helper()
	var h struct {
		TypedConfig map[string]any `json:"typed_config"`
	}
	raw, _ := stdjson.Marshal(value)
	if err := stdjson.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	if h.TypedConfig["@type"] != "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager" {
		t.Errorf("patch typed_config @type %v", h.TypedConfig["@type"])
	}
	delete(h.TypedConfig, "@type")
	var hcm hcmv3.HttpConnectionManager
	unmarshalProto(t, h.TypedConfig, &hcm)
	if err := hcm.GetAccessLogOptions().ValidateAll(); err != nil {
		t.Errorf("access_log_options: %v", err)
	}
	return &hcm
}

// envoyFlushIntervals returns the access_log_flush_interval every rendered
// Envoy configuration sets (0 where it sets none), by where it is: the
// plain-Envoy snippet, and each EnvoyFilter.
func envoyFlushIntervals(t *testing.T, d decoder, ms []manifest) map[string]time.Duration {
	t.Helper()
	got := map[string]time.Duration{}
	if len(find(ms, "ConfigMap", "rel-bulkhead-envoy")) == 1 {
		got["snippet"] = flushInterval(t, renderedSnippet(t, d, ms).AccessLogOptions)
	}
	for _, m := range find(ms, "EnvoyFilter", "") {
		ef := decodeAs[*networkingv1alpha3.EnvoyFilter](t, d, m)
		got[m.String()] = 0
		for _, p := range ef.GetConfigPatches() {
			if p.GetApplyTo() == networkingv1alpha3.EnvoyFilter_NETWORK_FILTER {
				got[m.String()] = patchedHCM(t, p.GetPatch().GetValue().AsMap()).
					GetAccessLogOptions().GetAccessLogFlushInterval().AsDuration()
			}
		}
	}
	return got
}

// envoyAccessLogs returns the access loggers of every rendered Envoy
// configuration that sets some, by where it is: the plain-Envoy snippet,
// and each EnvoyFilter that adds them (accessLog envoyFilter).
func envoyAccessLogs(t *testing.T, d decoder, ms []manifest) map[string][]*accesslogv3.AccessLog {
	t.Helper()
	got := map[string][]*accesslogv3.AccessLog{}
	decode := func(where string, logs []any) {
		for _, l := range logs {
			var al accesslogv3.AccessLog
			unmarshalProto(t, l, &al)
			got[where] = append(got[where], &al)
		}
	}
	if len(find(ms, "ConfigMap", "rel-bulkhead-envoy")) == 1 {
		decode("snippet", renderedSnippet(t, d, ms).AccessLog)
	}
	for _, m := range find(ms, "EnvoyFilter", "") {
		ef := decodeAs[*networkingv1alpha3.EnvoyFilter](t, d, m)
		for _, p := range ef.GetConfigPatches() {
			if p.GetApplyTo() == networkingv1alpha3.EnvoyFilter_NETWORK_FILTER {
				if logs, ok := p.GetPatch().GetValue().AsMap()["typed_config"].(map[string]any)["access_log"].([]any); ok {
					decode(m.String(), logs)
				}
			}
		}
	}
	return got
}

// checkAccessLogs checks the gRPC access loggers of one Envoy configuration
// for a heartbeat interval (0: off): the release logger, unbuffered, and
// with heartbeats on the heartbeat logger, which alone takes the periodic
// entries, batched with a flush interval of a quarter interval (as
// envoy/front-proxy.yaml.tmpl renders them).
func checkAccessLogs(t *testing.T, where string, logs []*accesslogv3.AccessLog, heartbeat time.Duration) {
	t.Helper()
	want := 1
	if heartbeat > 0 {
		want = 2
	}
	if len(logs) != want {
		t.Fatalf("%s: %d access loggers, want %d", where, len(logs), want)
	}
	for i, l := range logs {
		var cfg alsgrpcv3.HttpGrpcAccessLogConfig
		if err := l.GetTypedConfig().UnmarshalTo(&cfg); err != nil {
			t.Fatalf("%s: access log %d: %v", where, i, err)
		}
		if err := cfg.ValidateAll(); err != nil {
			t.Errorf("%s: access log %d: %v", where, i, err)
		}
		c := cfg.GetCommonConfig()
		types, onPermit := filterParts(t, where, l.GetFilter())
		if !permitFilter(onPermit, permit.MetadataNamespace) {
			t.Errorf("%s: access log %d filter %v: want only requests holding a permit logged", where, i, l.GetFilter())
		}
		periodicOnly := slices.Equal(types.GetTypes(), []datav3.AccessLogType{datav3.AccessLogType_DownstreamPeriodic})
		switch {
		case l.GetName() != "envoy.access_loggers.http_grpc":
			t.Errorf("%s: access log %d is %q", where, i, l.GetName())
		case i == 0 && (c.GetLogName() != "bulkhead" || c.GetBufferSizeBytes() == nil || c.GetBufferSizeBytes().GetValue() != 0):
			t.Errorf("%s: release logger %v: want log_name bulkhead, buffer_size_bytes 0", where, c)
		case i == 0 && heartbeat == 0 && types != nil:
			t.Errorf("%s: release logger filter %v with heartbeats off", where, l.GetFilter())
		case i == 0 && heartbeat > 0 && (!periodicOnly || !types.GetExclude()):
			t.Errorf("%s: release logger filter %v: want periodic entries excluded", where, l.GetFilter())
		case i == 1 && (!periodicOnly || types.GetExclude()):
			t.Errorf("%s: heartbeat logger filter %v: want periodic entries only", where, l.GetFilter())
		case i == 1 && (c.GetLogName() != "bulkhead-heartbeat" || c.GetBufferSizeBytes().GetValue() != 16384 ||
			c.GetBufferFlushInterval().AsDuration() != heartbeat/4):
			t.Errorf("%s: heartbeat logger %v: want log_name bulkhead-heartbeat, buffer_size_bytes 16384, buffer_flush_interval %v",
				where, c, heartbeat/4)
		}
	}
}

// filterParts splits an access log's filter into its log-type filter and
// its metadata filter, alone or in an and_filter; anything else fails t.
func filterParts(t *testing.T, where string, f *accesslogv3.AccessLogFilter) (*accesslogv3.LogTypeFilter, *accesslogv3.MetadataFilter) {
	t.Helper()
	parts := []*accesslogv3.AccessLogFilter{f}
	if and := f.GetAndFilter(); and != nil {
		parts = and.GetFilters()
	}
	var types *accesslogv3.LogTypeFilter
	var md *accesslogv3.MetadataFilter
	for _, p := range parts {
		switch {
		case p.GetLogTypeFilter() != nil && types == nil:
			types = p.GetLogTypeFilter()
		case p.GetMetadataFilter() != nil && md == nil:
			md = p.GetMetadataFilter()
		default:
			t.Errorf("%s: unexpected access log filter %v in %v", where, p, f)
		}
	}
	return types, md
}

// permitFilter reports whether f logs only what carries a permit token in
// the ext_authz filter namespace ns.
func permitFilter(f *accesslogv3.MetadataFilter, ns string) bool {
	m := f.GetMatcher()
	path := m.GetPath()
	return m.GetFilter() == ns && len(path) == 1 && path[0].GetKey() == permit.MetadataToken &&
		m.GetValue().GetPresentMatch() && f.GetMatchIfKeyNotFound() != nil && !f.GetMatchIfKeyNotFound().GetValue()
}

// One setting, leases.heartbeat_interval, is both the daemon's heartbeat
// interval and the access_log_flush_interval of every Envoy configuration
// the chart renders (the snippet, the EnvoyFilters in both access-log
// modes), and sets their heartbeat logger's flush interval; with heartbeat
// leases off no Envoy sends periodic entries, nor has a heartbeat logger.
func TestHeartbeatIntervalEverywhere(t *testing.T) {
	d := newDecoder(t)
	istio := filepath.Join(chartDir(t), "ci", "istio-values.yaml")
	telemetry := filepath.Join(chartDir(t), "ci", "istio-telemetry-values.yaml")
	for _, tc := range []struct {
		name string
		file string
		args []string
		want time.Duration
	}{
		// The chart's default is the daemon's (and the Envoy template's).
		{name: "default", file: istio, want: permit.DefaultHeartbeatInterval},
		{name: "telemetry mode", file: telemetry, want: permit.DefaultHeartbeatInterval},
		{name: "custom", file: istio, want: 2500 * time.Millisecond, args: []string{"--set-string",
			"config.leases.heartbeat_interval=2.5s,config.leases.heartbeat_ttl=6s,config.leases.recovery_window=3.5s"}},
		{name: "custom telemetry mode", file: telemetry, want: 500 * time.Millisecond, args: []string{"--set-string",
			"config.leases.heartbeat_interval=0.5s,config.leases.recovery_window=1s"}},
		// Unset: the daemon's default, and the chart's.
		{name: "unset", file: istio, want: permit.DefaultHeartbeatInterval, args: []string{"--set",
			"config.leases.heartbeat_interval=null"}},
		{name: "off", file: istio, args: []string{"--set-string", "config.leases.heartbeat_interval=0"}},
		{name: "off telemetry mode", file: telemetry, args: []string{"--set-string", "config.leases.heartbeat_interval=0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--set", "envoy.snippet.enabled=true"}, tc.args...)
			ms := render(t, tc.file, args...)
			if got := daemonConfig(t, d, ms).Leases.HeartbeatInterval; got != tc.want {
				t.Errorf("daemon's leases.heartbeat_interval %v, want %v", got, tc.want)
			}
			got := envoyFlushIntervals(t, d, ms)
			if _, ok := got["snippet"]; !ok || len(got) < 2 {
				t.Fatalf("want the snippet and EnvoyFilters, got %v", got)
			}
			for where, flush := range got {
				if flush != tc.want {
					t.Errorf("%s: access_log_flush_interval %v, want %v (0 = not set)", where, flush, tc.want)
				}
			}
			logs := envoyAccessLogs(t, d, ms)
			if _, ok := logs["snippet"]; !ok {
				t.Fatal("the snippet has no access log")
			}
			for where, l := range logs {
				checkAccessLogs(t, where, l, tc.want)
			}
		})
	}
}
