package platforms

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	promcrd "github.com/prometheus-operator/prometheus-operator/example"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

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
