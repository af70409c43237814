package platforms

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	promcrd "github.com/prometheus-operator/prometheus-operator/example"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// release is one helm release of the chart in TestChartOnAPIServer.
type release struct {
	name, namespace string
	values          []string // files of charts/bulkhead/ci
}

func (r release) String() string { return r.name + " in " + r.namespace }

// The chart against a real API server (kube-apiserver and etcd built from
// their Go modules, no kubelet): helm install with the default values, the
// Redis ledger's and Istio's; every object read back from the server holds
// what helm sent (nothing refused, defaulted over or pruned, custom
// resources included); helm upgrade changing a limit and helm rollback
// pass (no immutable field touched) and the ConfigMap as the server stored
// it carries the limit and passes `bulkhead --check-config`; helm
// uninstall leaves nothing in any namespace the chart wrote to. Pods are
// not scheduled: nothing runs them here.
func TestChartOnAPIServer(t *testing.T) {
	start := time.Now()
	k := startKube(t)
	t.Logf("etcd and kube-apiserver ready in %v", time.Since(start).Round(time.Millisecond))
	k.installCRDs(t, chartCRDs(t))
	bulkhead := buildBulkhead(t)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(k.disco))

	// The workloads' namespaces the Istio values name exist before the
	// chart puts its EnvoyFilters and AuthorizationPolicies there.
	for _, ns := range []string{"shop", "identity"} {
		k.createNamespace(t, ns)
	}
	releases := []release{
		{"bh", "bulkhead", nil},
		{"bh-redis", "bulkhead-redis", []string{"redis-values.yaml"}},
		{"bh-istio", "bulkhead-istio", []string{"istio-values.yaml"}},
	}
	namespaces := map[string]bool{"shop": true, "identity": true}
	for _, r := range releases {
		args := []string{"install", r.name, chartDir(t), "--namespace", r.namespace, "--create-namespace", "--timeout", "1m"}
		for _, v := range r.values {
			args = append(args, "--values", valuesFile(t, v))
		}
		k.helmOK(t, args...)
		objs := k.readBack(t, mapper, r)
		for _, o := range objs {
			namespaces[o.GetNamespace()] = true
		}
		cm := configMap(t, objs, r.name+"-bulkhead")
		code, out := checkConfig(t, bulkhead, cm)
		switch {
		case len(r.values) == 0 && code == 1 && strings.Contains(out, "no bulkheads"):
			t.Logf("%s: bulkhead --check-config on the stored ConfigMap: valid, and no bulkheads in the default values (exit 1):\n%s", r, out)
		case code == 0:
			t.Logf("%s: bulkhead --check-config on the stored ConfigMap passed:\n%s", r, out)
		default:
			t.Errorf("%s: bulkhead --check-config on the stored ConfigMap: exit %d\n%s", r, code, out)
		}
	}

	// Upgrade: one limit changes; the stored ConfigMap has it and the daemon accepts it.
	istio := releases[2]
	k.helmOK(t, "upgrade", istio.name, chartDir(t), "--namespace", istio.namespace, "--reuse-values",
		"--set", "bulkheads.catalog.max_concurrent=25", "--timeout", "1m")
	k.checkLimit(t, mapper, bulkhead, istio, "catalog", 25)
	k.helmOK(t, "rollback", istio.name, "1", "--namespace", istio.namespace, "--timeout", "1m")
	k.checkLimit(t, mapper, bulkhead, istio, "catalog", 10)
	k.helmOK(t, "history", istio.name, "--namespace", istio.namespace)

	for _, r := range releases {
		k.helmOK(t, "uninstall", r.name, "--namespace", r.namespace, "--wait", "--timeout", "1m")
	}
	nss := make([]string, 0, len(namespaces))
	for ns := range namespaces {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	if left := k.leftovers(t, nss); len(left) > 0 {
		t.Errorf("helm uninstall left %d objects:\n  %s", len(left), strings.Join(left, "\n  "))
	} else {
		t.Logf("after helm uninstall: no object left in namespaces %v", nss)
	}
	t.Logf("whole test: %v", time.Since(start).Round(time.Millisecond))
}

// helmOK runs helm against the cluster, logs the command and its output
// (the transcript), and fails the test if it fails.
func (k *kubeCluster) helmOK(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helm(t, k.kubeconfig, args...)
	shown := strings.ReplaceAll(strings.Join(args, " "), repoRoot(t)+"/", "")
	if err != nil {
		t.Fatalf("$ helm %s\n%s\n%v", shown, out, err)
	}
	t.Logf("$ helm %s\n%s", shown, strings.TrimRight(out, "\n"))
	return out
}

// readBack reads every object of the release's manifest back from the API
// server and checks that the stored object holds every field helm sent,
// with the value helm sent: a field the server dropped (pruned by a CRD's
// schema, or unknown to a built-in type), defaulted over or changed is an
// error.
func (k *kubeCluster) readBack(t *testing.T, mapper meta.ResettableRESTMapper, r release) []*unstructured.Unstructured {
	t.Helper()
	out, err := helm(t, k.kubeconfig, "get", "manifest", r.name, "--namespace", r.namespace)
	if err != nil {
		t.Fatalf("helm get manifest %s: %v\n%s", r, err, out)
	}
	ms := splitManifests(t, out)
	if len(ms) == 0 {
		t.Fatalf("%s: empty manifest", r)
	}
	var objs []*unstructured.Unstructured
	kinds := map[string]int{}
	for _, m := range ms {
		var sent map[string]any
		if err := yaml.Unmarshal(m.Raw, &sent); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		obj, err := k.get(mapper, &unstructured.Unstructured{Object: sent}, r.namespace)
		if err != nil {
			t.Errorf("%s: %s: reading it back: %v", r, m, err)
			continue
		}
		for _, d := range subsetDiff("", sent, obj.Object) {
			t.Errorf("%s: %s as stored: %s", r, m, d)
		}
		kinds[m.Kind]++
		objs = append(objs, obj)
	}
	t.Logf("%s: %d objects read back, each holding what helm sent: %v", r, len(objs), kinds)
	return objs
}

// get reads the stored version of obj.
func (k *kubeCluster) get(mapper meta.ResettableRESTMapper, obj *unstructured.Unstructured, namespace string) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return k.dyn.Resource(mapping.Resource).Get(ctx, obj.GetName(), metav1.GetOptions{})
	}
	if ns := obj.GetNamespace(); ns != "" {
		namespace = ns
	}
	return k.dyn.Resource(mapping.Resource).Namespace(namespace).Get(ctx, obj.GetName(), metav1.GetOptions{})
}

// subsetDiff lists where got does not hold want: every key of every map
// of want must be in got with an equal value; lists must have the same
// length. Numbers compare by value, resource quantities by amount, and an
// empty map or list in want is satisfied by its absence (the server does
// not store empty fields).
func subsetDiff(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			if len(w) == 0 && got == nil {
				return nil
			}
			return []string{fmt.Sprintf("%s: sent a map, stored %T", orRoot(path), got)}
		}
		var diffs []string
		keys := make([]string, 0, len(w))
		for key := range w {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			gv, present := g[key]
			if !present && !isEmpty(w[key]) {
				diffs = append(diffs, fmt.Sprintf("%s.%s: sent, not stored (dropped by the server)", path, key))
				continue
			}
			diffs = append(diffs, subsetDiff(path+"."+key, w[key], gv)...)
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok {
			if len(w) == 0 && got == nil {
				return nil
			}
			return []string{fmt.Sprintf("%s: sent a list, stored %T", orRoot(path), got)}
		}
		if len(g) != len(w) {
			return []string{fmt.Sprintf("%s: sent %d items, stored %d", path, len(w), len(g))}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, subsetDiff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	default:
		if scalarEqual(want, got) {
			return nil
		}
		return []string{fmt.Sprintf("%s: sent %#v, stored %#v", path, want, got)}
	}
}

func orRoot(path string) string {
	if path == "" {
		return "(object)"
	}
	return path
}

func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}

// scalarEqual compares YAML's float64 with the server's int64, and
// resource quantities ("0.5" and "500m") by amount.
func scalarEqual(want, got any) bool {
	if reflect.DeepEqual(want, got) {
		return true
	}
	if wf, ok := number(want); ok {
		gf, ok := number(got)
		return ok && wf == gf
	}
	ws, ok1 := want.(string)
	gs, ok2 := got.(string)
	if ok1 && ok2 {
		wq, err1 := resource.ParseQuantity(ws)
		gq, err2 := resource.ParseQuantity(gs)
		return err1 == nil && err2 == nil && wq.Cmp(gq) == 0
	}
	return false
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	}
	return 0, false
}

// configMap returns the daemon's configuration from the stored ConfigMap.
func configMap(t *testing.T, objs []*unstructured.Unstructured, name string) string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == name {
			cfg, ok, err := unstructured.NestedString(o.Object, "data", "bulkhead.yaml")
			if err != nil || !ok {
				t.Fatalf("ConfigMap %s: no data bulkhead.yaml (%v)", name, err)
			}
			return cfg
		}
	}
	t.Fatalf("no ConfigMap %s stored", name)
	return ""
}

// checkLimit reads the release back and checks that its stored ConfigMap
// gives the bulkhead the limit, and that the daemon accepts it.
func (k *kubeCluster) checkLimit(t *testing.T, mapper meta.ResettableRESTMapper, bulkhead string, r release, name string, limit int) {
	t.Helper()
	cfg := configMap(t, k.readBack(t, mapper, r), r.name+"-bulkhead")
	var parsed struct {
		Bulkheads map[string]struct {
			MaxConcurrent int `json:"max_concurrent"`
		} `json:"bulkheads"`
	}
	if err := yaml.Unmarshal([]byte(cfg), &parsed); err != nil {
		t.Fatalf("%s: stored bulkhead.yaml: %v", r, err)
	}
	if got := parsed.Bulkheads[name].MaxConcurrent; got != limit {
		t.Errorf("%s: stored ConfigMap: bulkhead %s max_concurrent %d, want %d", r, name, got, limit)
	}
	code, out := checkConfig(t, bulkhead, cfg)
	if code != 0 {
		t.Errorf("%s: bulkhead --check-config on the stored ConfigMap: exit %d\n%s", r, code, out)
		return
	}
	t.Logf("%s: stored ConfigMap: %s max_concurrent %d; bulkhead --check-config passed:\n%s", r, name, limit, out)
}

// buildBulkhead builds cmd/bulkhead from the repository (its own module).
func buildBulkhead(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bulkhead")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/bulkhead")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/bulkhead: %v\n%s", err, out)
	}
	return bin
}

// mountedFileRE matches the files the configuration names under
// /var/run/bulkhead/, where the chart mounts Secrets into the pod.
var mountedFileRE = regexp.MustCompile(`/var/run/bulkhead/[^\s"']+`)

// stageMountedFiles stands in for the pod's mounted Secrets, which the
// daemon checks exist: each file the configuration names under
// /var/run/bulkhead/ is made under a temporary root (a PEM certificate for
// a .crt or .pem file, a private key for a .key file, a password
// otherwise), and the configuration returned names them there.
// (charts/ledger_test.go checks that the Deployment mounts a Secret at
// each of those paths.)
func stageMountedFiles(t *testing.T, cfg string) string {
	t.Helper()
	files := mountedFileRE.FindAllString(cfg, -1)
	if len(files) == 0 {
		return cfg
	}
	root := t.TempDir()
	p := newPKI(t, t.TempDir())
	for _, f := range files {
		path := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		content := []byte("secret\n")
		switch filepath.Ext(f) {
		case ".crt", ".pem":
			content = readFile(t, p.caCert)
		case ".key":
			content = readFile(t, p.adminKey)
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return strings.ReplaceAll(cfg, "/var/run/bulkhead/", filepath.Join(root, "var", "run", "bulkhead")+"/")
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkConfig runs `bulkhead --check-config` on a configuration (its
// mounted files staged) and returns its exit code and output.
func checkConfig(t *testing.T, bulkhead, cfg string) (int, string) {
	t.Helper()
	cfg = stageMountedFiles(t, cfg)
	path := filepath.Join(t.TempDir(), "bulkhead.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bulkhead, "--config", path, "--check-config").CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, strings.TrimSpace(string(out))
	case errors.As(err, &exit):
		return exit.ExitCode(), strings.TrimSpace(string(out))
	default:
		t.Fatalf("bulkhead --check-config: %v", err)
		return 0, ""
	}
}

// chartCRDs returns the CustomResourceDefinitions of the custom kinds the
// chart renders, as their projects publish them: prometheus-operator's
// ServiceMonitor and PrometheusRule (embedded in its Go module's example
// package) and Istio's EnvoyFilter, Telemetry and AuthorizationPolicy
// (kubernetes/customresourcedefinitions.gen.yaml of the istio.io/api module).
func chartCRDs(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	var prom bytes.Buffer
	if err := promcrd.PrintAll(&prom); err != nil {
		t.Fatal(err)
	}
	istioFile := filepath.Join(moduleDir(t, "istio.io/api"), "kubernetes", "customresourcedefinitions.gen.yaml")
	istio, err := os.ReadFile(istioFile)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"servicemonitors.monitoring.coreos.com":   true,
		"prometheusrules.monitoring.coreos.com":   true,
		"envoyfilters.networking.istio.io":        true,
		"telemetries.telemetry.istio.io":          true,
		"authorizationpolicies.security.istio.io": true,
	}
	var crds []*unstructured.Unstructured
	for _, stream := range [][]byte{prom.Bytes(), istio} {
		for _, doc := range strings.Split("\n"+string(stream), "\n---") {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("a CRD: %v", err)
			}
			u := &unstructured.Unstructured{Object: obj}
			if obj == nil || u.GetKind() != "CustomResourceDefinition" || !want[u.GetName()] {
				continue
			}
			delete(want, u.GetName())
			crds = append(crds, u)
		}
	}
	if len(want) > 0 {
		t.Fatalf("CRDs not found in prometheus-operator's example package or %s: %v", istioFile, want)
	}
	return crds
}

// moduleDir is the directory of a module this module requires, in the
// module cache.
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = filepath.Join(repoRoot(t), "deploy", "platforms")
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go list -m %s: %v %s", module, err, out)
	}
	return strings.TrimSpace(string(out))
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRDs creates the CRDs and waits until each is established and
// served.
func (k *kubeCluster) installCRDs(t *testing.T, crds []*unstructured.Unstructured) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, crd := range crds {
		if _, err := k.dyn.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("CRD %s: %v", crd.GetName(), err)
		}
	}
	for _, crd := range crds {
		name := crd.GetName()
		waitFor(t, time.Minute, "CRD "+name+" established", func() error {
			got, err := k.dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				if c, ok := c.(map[string]any); ok && c["type"] == "Established" && c["status"] == "True" {
					return nil
				}
			}
			return errors.New("not established")
		})
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		for _, v := range versions {
			version, _ := v.(map[string]any)["name"].(string)
			waitFor(t, time.Minute, "CRD "+name+" served", func() error {
				list, err := k.disco.ServerResourcesForGroupVersion(group + "/" + version)
				if err != nil {
					return err
				}
				for _, r := range list.APIResources {
					if r.Kind == kind {
						return nil
					}
				}
				return fmt.Errorf("%s/%s: no %s yet", group, version, kind)
			})
		}
	}
	names := make([]string, 0, len(crds))
	for _, c := range crds {
		names = append(names, c.GetName())
	}
	t.Logf("CRDs installed and served: %s", strings.Join(names, ", "))
}

func (k *kubeCluster) createNamespace(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name},
	}}
	if _, err := k.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("namespace %s: %v", name, err)
	}
}

// leftovers lists every object in the namespaces, of every kind the
// server serves that can be listed, except Events.
func (k *kubeCluster) leftovers(t *testing.T, namespaces []string) []string {
	t.Helper()
	lists, err := k.disco.ServerPreferredNamespacedResources()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var left []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if r.Kind == "Event" || !hasVerb(r.Verbs, "list") {
				continue
			}
			for _, ns := range namespaces {
				objs, err := k.dyn.Resource(gv.WithResource(r.Name)).Namespace(ns).List(ctx, metav1.ListOptions{})
				if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
					continue
				}
				if err != nil {
					t.Fatalf("list %s in %s: %v", r.Name, ns, err)
				}
				for _, o := range objs.Items {
					left = append(left, fmt.Sprintf("%s %s/%s", o.GetKind(), ns, o.GetName()))
				}
			}
		}
	}
	return left
}

func hasVerb(verbs []string, v string) bool {
	for _, x := range verbs {
		if x == v {
			return true
		}
	}
	return false
}
