package charts

import (
	stdjson "encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/bulkhead-mesh/bulkhead/pkg/config"
)

// valuesBulkheads returns the bulkheads map of a values file (nil for the
// defaults).
func valuesBulkheads(t *testing.T, file string) map[string]map[string]any {
	t.Helper()
	if file == "" {
		return nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Bulkheads map[string]map[string]any `json:"bulkheads"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v.Bulkheads
}

func decodeAs[T any](t *testing.T, d decoder, m manifest) T {
	t.Helper()
	obj, err := d.decode(m)
	if err != nil {
		t.Fatalf("%s: %v", m, err)
	}
	v, ok := obj.(T)
	if !ok {
		t.Fatalf("%s decoded as %T", m, obj)
	}
	return v
}

// daemonConfig returns the daemon configuration of the rendered ConfigMap
// rel-bulkhead, as pkg/config parses it.
func daemonConfig(t *testing.T, d decoder, ms []manifest) *config.Config {
	t.Helper()
	cms := find(ms, "ConfigMap", "rel-bulkhead")
	if len(cms) != 1 {
		t.Fatalf("want one ConfigMap rel-bulkhead, got %d", len(cms))
	}
	cm := decodeAs[*corev1.ConfigMap](t, d, cms[0])
	cfg, err := config.Parse("configmap rel-bulkhead", []byte(cm.Data["bulkhead.yaml"]))
	if err != nil {
		t.Fatalf("pkg/config refuses the rendered configuration: %v\n%s", err, cm.Data["bulkhead.yaml"])
	}
	return cfg
}

// The ConfigMap holds a daemon configuration that pkg/config accepts, with
// exactly the values' bulkheads. pkg/config refuses unknown fields, so a
// chart-only key (critical, priority, istio) passed through fails here.
func TestRenderedDaemonConfig(t *testing.T) {
	d := newDecoder(t)
	for _, f := range valuesFiles(t) {
		t.Run(valuesName(f), func(t *testing.T) {
			cfg := daemonConfig(t, d, render(t, f))
			if cfg.Listen.GRPC != "0.0.0.0:9001" || cfg.Listen.HTTP != "0.0.0.0:9090" {
				t.Errorf("listen %+v, want all interfaces on 9001 and 9090", cfg.Listen)
			}
			want := valuesBulkheads(t, f)
			var got []string
			for name := range cfg.Bulkheads {
				got = append(got, name)
			}
			var wantNames []string
			for name, b := range want {
				wantNames = append(wantNames, name)
				if mc := int(b["max_concurrent"].(float64)); cfg.Bulkheads[name].Settings.MaxConcurrent != mc {
					t.Errorf("bulkhead %s: max_concurrent %d, want %d", name, cfg.Bulkheads[name].Settings.MaxConcurrent, mc)
				}
			}
			slices.Sort(got)
			slices.Sort(wantNames)
			if !slices.Equal(got, wantNames) {
				t.Errorf("bulkheads %q, want %q", got, wantNames)
			}
		})
	}
}

// The Deployment runs one non-root, read-only container probed on the
// health endpoints, with resource requests. With the in-memory ledger it
// runs at most one pod, never two at once; with the Redis ledger, replicas
// roll without losing capacity (ledger_test.go checks the rest).
func TestDeploymentHardening(t *testing.T) {
	d := newDecoder(t)
	for _, f := range valuesFiles(t) {
		t.Run(valuesName(f), func(t *testing.T) {
			ms := render(t, f)
			dep := decodeAs[*appsv1.Deployment](t, d, find(ms, "Deployment", "")[0])
			spec := dep.Spec.Template.Spec
			if daemonConfig(t, d, ms).Ledger.Backend == config.LedgerRedis {
				if dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || dep.Spec.Strategy.RollingUpdate == nil ||
					dep.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
					t.Errorf("strategy %+v, want RollingUpdate with maxUnavailable 0 (the replicas share the ledger)", dep.Spec.Strategy)
				}
			} else {
				if dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
					t.Errorf("strategy %q, want Recreate (two pods would each hold permits)", dep.Spec.Strategy.Type)
				}
				if r := dep.Spec.Replicas; r == nil || *r > 1 {
					t.Errorf("replicas %v, want at most 1 with the memory ledger", r)
				}
			}
			psc := spec.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
				t.Errorf("pod security context %+v: want runAsNonRoot and a non-zero runAsUser", psc)
			}
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Error("the service account token is mounted; the daemon needs no Kubernetes API")
			}
			if len(spec.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(spec.Containers))
			}
			c := spec.Containers[0]
			sc := c.SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, corev1.Capability("ALL")) {
				t.Errorf("container security context %+v: want a read-only root, no privilege escalation, all capabilities dropped", sc)
			}
			probe := func(name string, p *corev1.Probe, path string) {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "http" {
					t.Errorf("%s probe %+v: want HTTP GET %s on port http", name, p, path)
				}
			}
			probe("liveness", c.LivenessProbe, "/healthz")
			probe("readiness", c.ReadinessProbe, "/readyz")
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("resource requests %v: want cpu and memory", c.Resources.Requests)
			}
			if !slices.Equal(c.Args, []string{"--config", "/etc/bulkhead/bulkhead.yaml"}) {
				t.Errorf("args %q", c.Args)
			}
			if pdbs := find(ms, "PodDisruptionBudget", ""); len(pdbs) == 1 {
				pdb := decodeAs[*policyv1.PodDisruptionBudget](t, d, pdbs[0])
				if pdb.Spec.MinAvailable != nil || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
					t.Errorf("PDB %+v: want maxUnavailable 1 (minAvailable 1 would block every node drain)", pdb.Spec)
				}
			}
		})
	}
}

// Monitoring: the ServiceMonitor sets job="bulkhead" and marks critical
// bulkheads; the PrometheusRule is the rules file; the dashboard
// ConfigMap is the dashboard file, labelled for the Grafana sidecar.
func TestMonitoringResources(t *testing.T) {
	d := newDecoder(t)
	file := filepath.Join(chartDir(t), "ci", "full-values.yaml")
	ms := render(t, file)

	sm := decodeAs[*monitoringv1.ServiceMonitor](t, d, find(ms, "ServiceMonitor", "")[0])
	ep := sm.Spec.Endpoints[0]
	if ep.Port != "http-metrics" || ep.Path != "/metrics" {
		t.Errorf("endpoint %s %s", ep.Port, ep.Path)
	}
	var job, critical bool
	for _, r := range ep.RelabelConfigs {
		if r.TargetLabel == "job" && r.Replacement != nil && *r.Replacement == "bulkhead" {
			job = true
		}
	}
	for _, r := range ep.MetricRelabelConfigs {
		if r.TargetLabel == "criticality" && r.Regex == "auth|catalog" && r.Replacement != nil && *r.Replacement == "critical" {
			critical = true
		}
	}
	if !job || !critical {
		t.Errorf("ServiceMonitor relabelling: job=bulkhead %v, criticality for auth|catalog %v", job, critical)
	}

	pr := decodeAs[*monitoringv1.PrometheusRule](t, d, find(ms, "PrometheusRule", "")[0])
	raw, err := os.ReadFile(filepath.Join(chartDir(t), "rules", "bulkhead.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(raw, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pr.Spec, want) {
		t.Error("the PrometheusRule's spec differs from rules/bulkhead.rules.yaml")
	}

	dash := decodeAs[*corev1.ConfigMap](t, d, find(ms, "ConfigMap", "rel-bulkhead-dashboard")[0])
	rawDash, err := os.ReadFile(filepath.Join(chartDir(t), "dashboards", "bulkhead.json"))
	if err != nil {
		t.Fatal(err)
	}
	if dash.Data["bulkhead.json"] != strings.TrimRight(string(rawDash), "\n") {
		t.Error("the dashboard ConfigMap differs from dashboards/bulkhead.json")
	}
	if !stdjson.Valid([]byte(dash.Data["bulkhead.json"])) {
		t.Error("the dashboard ConfigMap holds invalid JSON")
	}
	if dash.Labels["grafana_dashboard"] != "1" || dash.Namespace != "monitoring" {
		t.Errorf("dashboard ConfigMap labels %v namespace %s", dash.Labels, dash.Namespace)
	}
}
