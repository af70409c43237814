package charts

import (
	"path/filepath"
	"testing"

	telemetryv1alpha1 "istio.io/api/telemetry/v1alpha1"

	"github.com/bulkhead-mesh/bulkhead/envoy"
)

// checkTelemetry checks a Telemetry resource (accessLog telemetry): one
// access-log entry, to the envoyHttpAls provider alone (istiod gives an
// entry's filter to every provider it names), whose filter expression is
// want ("" = no filter).
func checkTelemetry(t *testing.T, m manifest, tel *telemetryv1alpha1.Telemetry, want string) {
	t.Helper()
	logs := tel.GetAccessLogging()
	if len(logs) != 1 || len(logs[0].GetProviders()) != 1 || logs[0].GetProviders()[0].GetName() != "bulkhead-als" {
		t.Fatalf("%s: accessLogging %v: want one entry, for the provider bulkhead-als alone", m, logs)
	}
	l := logs[0]
	if got := l.GetFilter().GetExpression(); got != want || (want == "") != (l.GetFilter() == nil) {
		t.Errorf("%s: access-log filter %v, want expression %q", m, l.GetFilter(), want)
	}
	if l.GetMatch() != nil || l.GetDisabled() != nil {
		t.Errorf("%s: accessLogging match %v, disabled %v: want neither", m, l.GetMatch(), l.GetDisabled())
	}
}

// The Telemetry resource's access-log filter is istio.telemetryFilter: by
// default envoy.PermitLogExpression, the CEL form of the permit filter of
// the other Envoy configurations (only the requests that hold a permit are
// logged; e2e's TestIstioTelemetryLogsOnlyPermits runs it in Envoy behind
// the logger istiod generates); "" renders no filter.
func TestTelemetryFilter(t *testing.T) {
	d := newDecoder(t)
	file := filepath.Join(chartDir(t), "ci", "istio-telemetry-values.yaml")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "default", want: envoy.PermitLogExpression()},
		{name: "off", args: []string{"--set-string", "istio.telemetryFilter="}},
		{name: "custom", args: []string{"--set-string", "istio.telemetryFilter=response.code > 399"}, want: "response.code > 399"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := find(render(t, file, tc.args...), "Telemetry", "")
			if len(ms) != 1 {
				t.Fatalf("%d Telemetry resources, want 1", len(ms))
			}
			checkTelemetry(t, ms[0], decodeAs[*telemetryv1alpha1.Telemetry](t, d, ms[0]), tc.want)
		})
	}
}
