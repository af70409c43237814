package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bulkhead-mesh/bulkhead/deploy/monitoring"
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
)

type oneBulkhead struct{}

func (oneBulkhead) Snapshots() []bulkhead.Snapshot { return []bulkhead.Snapshot{{Name: "x"}} }

func (oneBulkhead) Oldest() map[string]time.Time { return map[string]time.Time{"x": time.Now()} }

func (oneBulkhead) States() []breaker.Named { return []breaker.Named{{Name: "x"}} }

func (oneBulkhead) EachShares(each func(dependency string, strict bool, envoys, held, limit, inFlight int, toStrict, toShares uint64)) {
	each("x", false, 1, 2, 2, 1, 0, 0)
}

func (oneBulkhead) EachSharesClass(each func(dependency string, priority bulkhead.Priority, envoys, held, limit, inFlight int)) {
	each("x", bulkhead.Normal, 1, 2, 2, 1)
	each("x", bulkhead.Critical, 0, 0, 0, 0)
}

func (oneBulkhead) EachSharesRequests(each func(dependency string, admitted, overflowed uint64)) {
	each("x", 10, 1)
}

// capture records the collectors registered on it, and registers them on
// reg too.
type capture struct {
	reg        *prometheus.Registry
	collectors []prometheus.Collector
}

func (c *capture) Register(col prometheus.Collector) error {
	c.collectors = append(c.collectors, col)
	return c.reg.Register(col)
}

func (c *capture) MustRegister(cs ...prometheus.Collector) {
	for _, col := range cs {
		if err := c.Register(col); err != nil {
			panic(err)
		}
	}
}

func (c *capture) Unregister(col prometheus.Collector) bool { return c.reg.Unregister(col) }

var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

// exportedNames returns every series name pkg/metrics can export: each
// metric's name, plus _bucket, _sum and _count for histograms and
// summaries.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	c := &capture{reg: prometheus.NewPedanticRegistry()}
	m, err := metrics.New(c, oneBulkhead{})
	if err != nil {
		t.Fatal(err)
	}
	m.Waited("x", time.Millisecond) // creates the per-dependency series, histograms included
	if err := metrics.RegisterOldest(c, oneBulkhead{}, time.Now); err != nil {
		t.Fatal(err)
	}
	if err := metrics.RegisterBreakers(c, oneBulkhead{}); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.NewLedgerMetrics(c, "redis"); err != nil {
		t.Fatal(err)
	}
	if err := metrics.RegisterShares(c, oneBulkhead{}); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, col := range c.collectors {
		ch := make(chan *prometheus.Desc, 64)
		go func() { col.Describe(ch); close(ch) }()
		for d := range ch {
			if mm := fqNameRE.FindStringSubmatch(d.String()); mm != nil {
				names[mm[1]] = true
			}
		}
	}
	mfs, err := c.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY:
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+s] = true
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d metric names in pkg/metrics: %v", len(names), names)
	}
	return names
}

// A typo in a metric name in the dashboard or the rules fails here,
// without a Prometheus. envoy_* names are Envoy's own stats: they must be
// ones monitoring.EnvoyMetrics lists (the e2e test checks those against a
// real Envoy).
func TestArtifactsUseExportedMetricNames(t *testing.T) {
	known := exportedNames(t)
	for _, n := range monitoring.EnvoyMetrics {
		known[n] = true
	}
	qs, err := monitoring.DashboardQueries(readRepoFile(t, dashboardPath), monitoring.DefaultVars())
	if err != nil {
		t.Fatal(err)
	}
	rules, err := monitoring.Rules(readRepoFile(t, rulesPath))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.Record != "" {
			known[r.Record] = true // a recorded series, read by the dashboard and other rules
		}
	}
	type use struct{ where, expr string }
	var uses []use
	for _, q := range qs {
		uses = append(uses, use{dashboardPath + ": " + q.Source, q.Expr})
	}
	for _, r := range rules {
		uses = append(uses, use{rulesPath + ": " + r.Name(), r.Expr})
	}
	for _, u := range uses {
		names := monitoring.MetricNames(u.expr)
		if len(names) == 0 && !strings.Contains(u.expr, `up{job="bulkhead"}`) {
			t.Errorf("%s: uses no bulkhead or Envoy metric: %s", u.where, u.expr)
		}
		for _, n := range names {
			switch {
			case known[n]:
			case strings.HasPrefix(n, "envoy_"):
				t.Errorf("%s: metric %s is not in monitoring.EnvoyMetrics (Envoy stats checked against a real Envoy)", u.where, n)
			default:
				t.Errorf("%s: metric %s is not exported by pkg/metrics", u.where, n)
			}
		}
	}
}

// The dashboard shows what the issue asks for.
func TestDashboardCoverage(t *testing.T) {
	raw := readRepoFile(t, dashboardPath)
	qs, err := monitoring.DashboardQueries(raw, map[string]string{
		"dependency": "$dependency", "kind": "$kind", "__rate_interval": "$__rate_interval", "datasource": "",
	})
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, q := range qs {
		all = append(all, q.Expr)
		// Per-bulkhead panels follow the dependency variable.
		if strings.Contains(q.Expr, "dependency") && !strings.Contains(q.Expr, `dependency=~"$dependency"`) &&
			!strings.HasPrefix(q.Source, "variable") {
			t.Errorf("%s groups by dependency but ignores $dependency: %s", q.Source, q.Expr)
		}
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{
		"bulkhead_active_calls", "bulkhead_limit", "bulkhead_queued_calls",
		"bulkhead_admitted_total", "by (dependency, priority)",
		"bulkhead_rejected_total", "by (dependency, reason)",
		"bulkhead_wait_seconds_bucket", "bulkhead_permit_hold_seconds_bucket", "bulkhead_permit_release_lag_seconds_bucket", "histogram_quantile(0.99",
		"bulkhead_success_total", "bulkhead_failure_total",
		"bulkhead_permits_expired_total", "bulkhead_config_reloads_total",
		"bulkhead_heartbeat_problems_total", "by (problem)",
		"bulkhead_permits_adopted_total", "bulkhead_admissions_paused",
		"bulkhead_oldest_permit_age_seconds",
		// Shares (pkg/shares).
		"bulkhead_shares_permits", "bulkhead_shares_limit", "bulkhead_shares_in_flight",
		"bulkhead_shares_envoys", "bulkhead_shares_mode", "bulkhead_shares_switches_total", "by (dependency, to)", "bulkhead_shares_requests_total",
		// Their class split (priority normal or critical).
		"bulkhead_shares_class_permits", "bulkhead_shares_class_limit", "bulkhead_shares_class_in_flight",
		"bulkhead_shares_class_envoys",
		// Envoy's side.
		"envoy_http_ext_authz_ok", "envoy_http_ext_authz_denied", "envoy_http_ext_authz_error",
		"envoy_http_ext_authz_failure_mode_allowed", "envoy_cluster_upstream_rq_timeout",
		"envoy_access_logs_grpc_access_log_logs_dropped", "envoy_access_logs_grpc_access_log_grpc_entries_flush_failed",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("no dashboard query contains %q", want)
		}
	}
	if !strings.Contains(string(raw), `"type": "heatmap"`) {
		t.Error("no heatmap panel (utilisation per bulkhead over time)")
	}
	if !strings.Contains(string(raw), `"title": "As Envoy sees it"`) {
		t.Error(`no row "As Envoy sees it" (Envoy's own ext_authz and access-log stats)`)
	}
	if !strings.Contains(string(raw), `"name": "dependency"`) {
		t.Error("no dependency template variable")
	}
}

// The rules have the alerts the issue asks for, with their severities.
func TestRulesCoverage(t *testing.T) {
	rules, err := monitoring.Rules(readRepoFile(t, rulesPath))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"BulkheadCriticalRejections": "page",
		"BulkheadRejections":         "warning",
		"BulkheadSaturated":          "warning",
		"BulkheadPermitsExpired":     "warning",
		"BulkheadHeartbeatMissing":   "warning",
		"BulkheadConfigReloadFailed": "warning",
		"BulkheadDown":               "page",
		"BulkheadAbsent":             "page",
		"BulkheadExtAuthzErrors":     "page",
		"BulkheadFailOpen":           "warning",
		"BulkheadCircuitFlapping":    "warning",
		"BulkheadSharesFlapping":     "warning",
		"BulkheadSharesOverflowing":  "warning",
	}
	var got []string
	for _, r := range rules {
		got = append(got, r.Alert)
		if sev, ok := want[r.Alert]; ok && r.Labels["severity"] != sev {
			t.Errorf("%s: severity %q, want %q", r.Alert, r.Labels["severity"], sev)
		}
		if r.Alert != "" && (r.Annotations["summary"] == "" || r.Annotations["description"] == "") { // recording rules have none
			t.Errorf("%s: needs a summary and a description", r.Name())
		}
		if r.Alert == "BulkheadHeartbeatMissing" &&
			(!strings.Contains(r.Expr, "bulkhead_heartbeat_problems_total") || !strings.Contains(r.Annotations["description"], "access_log_flush_interval") ||
				!strings.Contains(r.Annotations["description"], "leases.heartbeat_interval")) {
			t.Errorf("%s: want it on bulkhead_heartbeat_problems_total, its description naming access_log_flush_interval and leases.heartbeat_interval", r.Alert)
		}
		if r.Alert == "BulkheadCriticalRejections" &&
			(!strings.Contains(r.Expr, `criticality="critical"`) || !strings.HasSuffix(r.Expr, "> 0.01")) {
			t.Errorf("%s: want a 1%% threshold on criticality=\"critical\" series: %s", r.Alert, r.Expr)
		}
	}
	for _, r := range rules {
		if strings.HasPrefix(r.Alert, "BulkheadExtAuthz") || r.Alert == "BulkheadFailOpen" {
			if !strings.Contains(r.Expr, "envoy_http_ext_authz_") || strings.Contains(r.Expr, "job=") {
				t.Errorf("%s: want it on Envoy's envoy_http_ext_authz_* stats, selecting no job: %s", r.Alert, r.Expr)
			}
		}
	}
	for name := range want {
		if !slices.Contains(got, name) {
			t.Errorf("alert %s missing", name)
		}
	}
}

// README.md names every series pkg/metrics exports (its Metrics table, or
// for the tenants' series the Tenants section), as `name{labels}` or
// `name`; a histogram by its base name.
func TestREADMENamesEveryMetric(t *testing.T) {
	readme := string(readRepoFile(t, "README.md"))
	names := exportedNames(t)
	for n := range names {
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, s); ok && names[base] {
				n = base
			}
		}
		if !strings.Contains(readme, "`"+n+"{") && !strings.Contains(readme, "`"+n+"`") {
			t.Errorf("README.md does not name the metric %s: add its row to the Metrics table", n)
		}
	}
}
