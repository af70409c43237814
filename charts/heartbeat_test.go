package charts

import (
	stdjson "encoding/json"
	"path/filepath"
	"testing"
	"time"

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

// One setting, leases.heartbeat_interval, is both the daemon's heartbeat
// interval and the access_log_flush_interval of every Envoy configuration
// the chart renders (the snippet, the EnvoyFilters in both access-log
// modes); with heartbeat leases off no Envoy sends periodic entries.
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
			"config.leases.heartbeat_interval=2.5s,config.leases.heartbeat_ttl=6s,config.leases.recovery_window=3s"}},
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
		})
	}
}
