package metrics_test

import (
	"context"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulkhead-mesh/bulkhead/pkg/accesslog"
	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// specNames are the metric names /tmp/spec.md (the shared contract) lists.
var specNames = []string{
	"bulkhead_active_calls", "bulkhead_queued_calls", "bulkhead_limit", "bulkhead_rejected_total",
	"bulkhead_admitted_total", "bulkhead_success_total", "bulkhead_failure_total", "bulkhead_wait_seconds",
	"bulkhead_permit_hold_seconds", "bulkhead_permits_expired_total", "bulkhead_releases_total",
}

// closedSets are the values each label may take.
var closedSets = map[string]map[string]bool{
	"dependency": set("catalog", metrics.UnknownDependency),
	"priority":   set("critical", "normal", "best_effort"),
	"reason":     set("queue_full", "shed", "timeout", "unknown_bulkhead", "circuit_open", "ledger_unavailable"),
	"source":     set("access_log", "ttl", "cancel", "shutdown", "duplicate", "unknown"),
	"outcome":    set("allowed", "denied", "defaulted"),
	"input":      set(string(bulkhead.InputTenant), string(bulkhead.InputNode)),
	"result":     set("released", "renewed", "adopted", "duplicate", "late", "unknown", "no_token", "not_end", "ledger_unavailable", "forwarded", "success", "failure", "ok", "error", "timeout", "deadline"),
	"op":         set("acquire", "release", "renew", "leave", "state", "replicas", "reopen"),
	"state":      set("strict", "unavailable"),
	"to":         set("strict", "unavailable"),
	"backend":    set("memory", "redis"),
	"problem":    set("no_periodic_entries", "ended_after_expiry", "renewed_after_expiry"),
	"kind":       set("requests", "connections"),
}

func set(vs ...string) map[string]bool {
	m := map[string]bool{}
	for _, v := range vs {
		m[v] = true
	}
	return m
}

type fixture struct {
	reg    *prometheus.Registry
	m      *metrics.Metrics
	bh     *bulkhead.Registry
	clk    *clock.Fake
	ledger *permit.Memory
	az     *authz.Server
	als    *accesslog.Server
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{reg: prometheus.NewRegistry(), bh: bulkhead.NewRegistry(), clk: clock.NewFake(time.Unix(1_000_000, 0))}
	if _, err := f.bh.Apply(map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 1, MaxQueue: 0}}); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(f.reg, f.bh)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.m = m
	m.SetKinds(map[string]string{"catalog": "requests"})
	f.ledger = permit.NewMemory(f.clk, permit.WithObserver(m))
	backend := admission.NewMemory(f.bh, f.ledger, permit.Heartbeat{}, admission.WithClock(f.clk))
	f.az = authz.New(f.bh, backend, m, authz.DefaultPolicy(), authz.WithClock(f.clk))
	f.als = accesslog.New(backend, m, nil)
	return f
}

func (f *fixture) check(t *testing.T, key string, headers map[string]string) *authv3.CheckResponse {
	t.Helper()
	resp, err := f.az.Check(context.Background(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: map[string]string{"bulkhead": key},
		Request:           &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Headers: headers}},
	}})
	if err != nil {
		t.Fatalf("Check(%q): %v", key, err)
	}
	return resp
}

func token(resp *authv3.CheckResponse) string {
	return resp.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue()
}

// fakeStream delivers msgs then io.EOF.
type fakeStream struct {
	grpc.ServerStream
	msgs []*alsv3.StreamAccessLogsMessage
}

func (s *fakeStream) Recv() (*alsv3.StreamAccessLogsMessage, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}
func (s *fakeStream) SendAndClose(*alsv3.StreamAccessLogsResponse) error { return nil }
func (s *fakeStream) Context() context.Context                           { return context.Background() }

func logEnd(tok string, code uint32) *alsv3.StreamAccessLogsMessage {
	meta := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{permit.MetadataNamespace: {Fields: map[string]*structpb.Value{
		permit.MetadataToken: structpb.NewStringValue(tok)}}}}
	return &alsv3.StreamAccessLogsMessage{LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{
		LogEntry: []*datav3.HTTPAccessLogEntry{{
			CommonProperties: &datav3.AccessLogCommon{AccessLogType: datav3.AccessLogType_DownstreamEnd, Metadata: meta},
			Response:         &datav3.HTTPResponseProperties{ResponseCode: wrapperspb.UInt32(code)},
		}},
	}}}
}

// activity: one admitted (invalid priority header), one rejected, one
// unknown bulkhead, one released by the access log and then a duplicate,
// one expired by TTL.
func (f *fixture) activity(t *testing.T) {
	t.Helper()
	t1 := token(f.check(t, "catalog", map[string]string{"x-bulkhead-priority": "urgent"}))
	if t1 == "" {
		t.Fatal("first Check not admitted")
	}
	if resp := f.check(t, "catalog", nil); resp.GetDeniedResponse() == nil {
		t.Fatal("second Check not rejected")
	}
	if resp := f.check(t, "no-such-bulkhead", nil); resp.GetDeniedResponse() == nil {
		t.Fatal("unknown bulkhead not rejected")
	}
	f.clk.Advance(250 * time.Millisecond)
	if err := f.als.StreamAccessLogs(&fakeStream{msgs: []*alsv3.StreamAccessLogsMessage{logEnd(t1, 200), logEnd(t1, 200)}}); err != nil {
		t.Fatal(err)
	}
	if t2 := token(f.check(t, "catalog", nil)); t2 == "" {
		t.Fatal("third Check not admitted")
	}
	f.clk.Advance(authz.DefaultPolicy().DefaultLeaseTTL)
	if n := f.ledger.Sweep(); n != 1 {
		t.Fatalf("Sweep ended %d leases, want 1", n)
	}
	f.m.Reload(false)
}

func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// value returns the value of the sample of family name with exactly these
// labels (a histogram's sample count), and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range fams[name].GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		match := true
		for _, lp := range m.GetLabel() {
			if want[lp.GetName()] != lp.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func TestMetricsAfterActivity(t *testing.T) {
	f := newFixture(t)
	f.activity(t)
	fams := gather(t, f.reg)

	for _, name := range specNames {
		if _, ok := fams[name]; !ok {
			t.Errorf("metric %s missing", name)
		}
	}
	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"bulkhead_limit", []string{"dependency", "catalog"}, 1},
		{"bulkhead_queue_limit", []string{"dependency", "catalog"}, 0},
		{"bulkhead_kind", []string{"dependency", "catalog", "kind", "requests"}, 1},
		{"bulkhead_active_calls", []string{"dependency", "catalog"}, 0},
		{"bulkhead_queued_calls", []string{"dependency", "catalog"}, 0},
		{"bulkhead_admitted_total", []string{"dependency", "catalog", "priority", "normal"}, 2},
		{"bulkhead_admitted_total", []string{"dependency", "catalog", "priority", "critical"}, 0},
		{"bulkhead_rejected_total", []string{"dependency", "catalog", "reason", "queue_full"}, 1},
		{"bulkhead_rejected_total", []string{"dependency", "catalog", "reason", "timeout"}, 0},
		{"bulkhead_rejected_total", []string{"dependency", metrics.UnknownDependency, "reason", "unknown_bulkhead"}, 1},
		{"bulkhead_cancelled_total", []string{"dependency", "catalog"}, 0},
		{"bulkhead_success_total", []string{"dependency", "catalog"}, 1},
		// Created at zero by the first admission, so ratios read 0, not "no data".
		{"bulkhead_failure_total", []string{"dependency", "catalog"}, 0},
		{"bulkhead_aborted_total", []string{"dependency", "catalog"}, 0},
		{"bulkhead_wait_seconds", []string{"dependency", "catalog"}, 2},
		{"bulkhead_permit_hold_seconds", []string{"dependency", "catalog"}, 2},
		{"bulkhead_permits_expired_total", []string{"dependency", "catalog"}, 1},
		{"bulkhead_releases_total", []string{"source", "access_log"}, 1},
		{"bulkhead_releases_total", []string{"source", "ttl"}, 1},
		{"bulkhead_releases_total", []string{"source", "duplicate"}, 1},
		{"bulkhead_releases_total", []string{"source", "unknown"}, 0},
		{"bulkhead_releases_total", []string{"source", "cancel"}, 0},
		{"bulkhead_invalid_priority_total", []string{"dependency", "catalog"}, 1},
		{"bulkhead_unmatched_checks_total", []string{"outcome", "denied"}, 1},
		{"bulkhead_access_log_entries_total", []string{"result", "released"}, 1},
		{"bulkhead_access_log_entries_total", []string{"result", "duplicate"}, 1},
		{"bulkhead_access_log_streams", nil, 0},
		{"bulkhead_config_reloads_total", []string{"result", "failure"}, 1},
		{"bulkhead_config_reloads_total", []string{"result", "success"}, 0},
	}
	for _, tt := range tests {
		got, ok := value(fams, tt.name, tt.labels...)
		if !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
	// The hold histogram saw 250ms (access log) and the lease TTL (expiry).
	var sum float64
	for _, m := range fams["bulkhead_permit_hold_seconds"].GetMetric() {
		sum += m.GetHistogram().GetSampleSum()
	}
	if want := 0.25 + authz.DefaultPolicy().DefaultLeaseTTL.Seconds(); sum != want {
		t.Errorf("hold seconds sum = %v, want %v", sum, want)
	}
}

func TestLabelsFromClosedSets(t *testing.T) {
	f := newFixture(t)
	f.activity(t)
	// Hostile keys and priorities never become label values.
	f.check(t, "Evil\nkey", map[string]string{"x-bulkhead-priority": "\xff"})
	f.check(t, strings.Repeat("k", 500), nil)
	for name, mf := range gather(t, f.reg) {
		if !strings.HasPrefix(name, "bulkhead_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				allowed, known := closedSets[lp.GetName()]
				if !known {
					t.Errorf("%s: label %q not in any closed set", name, lp.GetName())
					continue
				}
				if !allowed[lp.GetValue()] {
					t.Errorf("%s{%s=%q}: value outside the closed set", name, lp.GetName(), lp.GetValue())
				}
			}
		}
	}
}

func TestLint(t *testing.T) {
	f := newFixture(t)
	f.activity(t)
	problems, err := testutil.GatherAndLint(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(problems, func(i, j int) bool { return problems[i].Metric < problems[j].Metric })
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestOutcomes(t *testing.T) {
	f := newFixture(t)
	f.m.Outcome("catalog", bulkhead.Success)
	f.m.Outcome("catalog", bulkhead.Failure)
	f.m.Outcome("catalog", bulkhead.Failure)
	f.m.Outcome("catalog", bulkhead.Aborted)
	f.m.Unmatched("allowed")
	f.m.Unmatched("defaulted")
	f.m.StreamOpened()
	f.m.StreamOpened()
	f.m.StreamClosed()
	f.m.Ignored(permit.AccessLog, permit.Unknown)
	f.m.Ignored(permit.AccessLog, permit.Released) // not a no-op result: ignored
	f.m.InvalidLeaseTTL("catalog")
	f.m.Adopted("catalog")
	f.m.HeartbeatProblem(permit.EndedAfterExpiry)
	f.m.Ignored(permit.AccessLog, permit.Expired) // a late end entry: a duplicate release
	f.m.AdmissionsPaused(true)
	f.m.UntrustedPriority("catalog")
	f.m.UntrustedPriority("catalog")
	f.m.InvalidInput(bulkhead.InputNode)
	fams := gather(t, f.reg)
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"bulkhead_success_total", []string{"dependency", "catalog"}, 1},
		{"bulkhead_failure_total", []string{"dependency", "catalog"}, 2},
		{"bulkhead_aborted_total", []string{"dependency", "catalog"}, 1},
		{"bulkhead_unmatched_checks_total", []string{"outcome", "allowed"}, 1},
		{"bulkhead_rejected_total", []string{"dependency", metrics.UnknownDependency, "reason", "unknown_bulkhead"}, 0},
		{"bulkhead_access_log_streams", nil, 1},
		{"bulkhead_releases_total", []string{"source", "unknown"}, 1},
		{"bulkhead_releases_total", []string{"source", "access_log"}, 0},
		{"bulkhead_invalid_lease_ttl_total", []string{"dependency", "catalog"}, 1},
		{"bulkhead_permits_adopted_total", []string{"dependency", "catalog"}, 1},
		{"bulkhead_heartbeat_problems_total", []string{"problem", "ended_after_expiry"}, 1},
		{"bulkhead_heartbeat_problems_total", []string{"problem", "no_periodic_entries"}, 0},
		{"bulkhead_releases_total", []string{"source", "duplicate"}, 1},
		{"bulkhead_admissions_paused", nil, 1},
		{"bulkhead_untrusted_priority_total", []string{"dependency", "catalog"}, 2},
		{"bulkhead_invalid_inputs_total", []string{"input", "node"}, 1},
		// Created at zero, so that a rate reads 0 rather than "no data".
		{"bulkhead_invalid_inputs_total", []string{"input", "tenant"}, 0},
	} {
		if got, ok := value(fams, tt.name, tt.labels...); !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
}

func TestNewRegistersOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	bh := bulkhead.NewRegistry()
	if _, err := metrics.New(reg, bh); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg, bh); err == nil {
		t.Fatal("a second New on the same registry succeeded")
	}
}

func TestEmptyRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, bulkhead.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	fams := gather(t, reg)
	// With no bulkhead, the _unknown rejection series still exists.
	if got, ok := value(fams, "bulkhead_rejected_total", "dependency", metrics.UnknownDependency, "reason", "unknown_bulkhead"); !ok || got != 0 {
		t.Fatalf("_unknown rejection series = %v, %v", got, ok)
	}
	if n, err := testutil.GatherAndCount(reg, "bulkhead_limit"); err != nil || n != 0 {
		t.Fatalf("bulkhead_limit series without bulkheads = %d, %v", n, err)
	}
}
