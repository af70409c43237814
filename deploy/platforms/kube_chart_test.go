package platforms

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// release is one helm release of the chart in TestChartOnAPIServer.
type release struct {
	name, namespace string
	values          []string // files of charts/bulkhead/ci
	set             []string // --set
}

func (r release) String() string { return r.name + " in " + r.namespace }

// The chart against a real API server (kube-apiserver and etcd built from
// their Go modules, no kubelet): helm install with the default values, the
// Redis ledger's and Istio's (both access-log modes); every object read back from the server holds
// what helm sent (nothing refused, defaulted over or pruned, custom
// resources included); with the memory ledger, the chart's admission
// policy makes the server refuse a second replica (kubectl scale, or an
// edit); helm upgrade changing a limit and helm rollback
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
	// chart puts its EnvoyFilters and AuthorizationPolicies there (and, in
	// shop-telemetry, the Telemetry mode's EnvoyFilter and Telemetry with
	// its access-log filter: a namespace of its own, as their names are
	// those of bh-istio's).
	for _, ns := range []string{"shop", "identity", "shop-telemetry"} {
		k.createNamespace(t, ns)
	}
	// The one-replica admission policy on: rendered for the memory ledger
	// (bh), not for the Redis ledger (bh-redis, two replicas).
	onePolicy := []string{"admissionPolicy.enabled=true"}
	releases := []release{
		{"bh", "bulkhead", nil, onePolicy},
		{"bh-redis", "bulkhead-redis", []string{"redis-values.yaml"}, onePolicy},
		{"bh-istio", "bulkhead-istio", []string{"istio-values.yaml"}, nil},
		{"bh-istio-telemetry", "bulkhead-istio-telemetry", []string{"istio-telemetry-values.yaml"},
			[]string{"bulkheads.catalog.istio.namespace=shop-telemetry"}},
	}
	namespaces := map[string]bool{"shop": true, "identity": true, "shop-telemetry": true}
	for _, r := range releases {
		args := []string{"install", r.name, chartDir(t), "--namespace", r.namespace, "--create-namespace", "--timeout", "1m"}
		for _, v := range r.values {
			args = append(args, "--values", valuesFile(t, v))
		}
		for _, v := range r.set {
			args = append(args, "--set", v)
		}
		k.helmOK(t, args...)
		objs := k.readBack(t, mapper, r)
		for _, o := range objs {
			if ns := o.GetNamespace(); ns != "" { // "": cluster-scoped, see admissionLeftovers
				namespaces[ns] = true
			}
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

	// The memory ledger's release: more than one replica refused by the API
	// server, outside helm too. (bh-redis's two replicas were admitted.)
	k.checkOneReplicaPolicy(t, releases[0])

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
	left := append(k.leftovers(t, nss), k.admissionLeftovers(t)...)
	if len(left) > 0 {
		t.Errorf("helm uninstall left %d objects:\n  %s", len(left), strings.Join(left, "\n  "))
	} else {
		t.Logf("after helm uninstall: no object left in namespaces %v, and no admission policy", nss)
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
