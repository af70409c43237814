package charts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
)

// mountedSecret returns the Secret name and key behind the file path in
// the bulkhead container (a volume mount of a secret volume whose item has
// that path), or "" when no secret volume serves the path.
func mountedSecret(spec corev1.PodSpec, path string) (secret, key string) {
	for _, m := range spec.Containers[0].VolumeMounts {
		rel, ok := strings.CutPrefix(path, m.MountPath+"/")
		if !ok {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					return v.Secret.SecretName, it.Key
				}
			}
		}
	}
	return "", ""
}

// ci/redis-values.yaml: three replicas on one Redis ledger. The daemon's
// configuration names the backend, and its password and CA files are the
// Secrets' keys mounted in the container; the pods spread over nodes
// (preferred anti-affinity by hostname), roll without losing capacity, and
// the PodDisruptionBudget lets drains evict one at a time; Envoy's cluster
// resolves the headless Service, so it balances over every replica.
func TestRedisLedgerValues(t *testing.T) {
	d := newDecoder(t)
	ms := render(t, filepath.Join(chartDir(t), "ci", "redis-values.yaml"))
	cfg := daemonConfig(t, d, ms)
	l := cfg.Ledger
	if l.Backend != config.LedgerRedis || l.OnUnavailable != admission.FailClosed || !l.Redis.CapacityLeases {
		t.Errorf("ledger %v on_unavailable %v capacity_leases %v, want redis, fail_closed, true",
			l.Backend, l.OnUnavailable, l.Redis.CapacityLeases)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("the chart's example configuration warns: %q", cfg.Warnings)
	}
	if l.Redis.Address != "redis-master.redis.svc.cluster.local:6379" || l.Redis.Prefix != "mesh-a:" || !l.Redis.TLS.Enabled {
		t.Errorf("ledger.redis %+v", l.Redis)
	}

	dep := decodeAs[*appsv1.Deployment](t, d, find(ms, "Deployment", "")[0])
	spec := dep.Spec.Template.Spec
	if r := dep.Spec.Replicas; r == nil || *r != 3 {
		t.Errorf("replicas %v, want 3", r)
	}
	for _, f := range []struct{ key, path, secret, secretKey string }{
		{"ledger.redis.password_file", l.Redis.PasswordFile, "bulkhead-redis", "password"},
		{"ledger.redis.tls.ca_file", l.Redis.TLS.CAFile, "bulkhead-redis-tls", "ca.crt"},
	} {
		if s, k := mountedSecret(spec, f.path); s != f.secret || k != f.secretKey {
			t.Errorf("%s %q: served by Secret %q key %q, want %q key %q", f.key, f.path, s, k, f.secret, f.secretKey)
		}
	}
	if l.Redis.TLS.CertFile != "" || l.Redis.TLS.KeyFile != "" {
		t.Errorf("client certificate %q %q set, but the values give none", l.Redis.TLS.CertFile, l.Redis.TLS.KeyFile)
	}

	a := spec.Affinity
	if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Fatalf("affinity %+v, want one preferred pod anti-affinity term", a)
	}
	term := a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	if term.TopologyKey != "kubernetes.io/hostname" || term.LabelSelector == nil {
		t.Errorf("anti-affinity term %+v, want by kubernetes.io/hostname", term)
	} else {
		for k, v := range term.LabelSelector.MatchLabels {
			if dep.Spec.Template.Labels[k] != v {
				t.Errorf("anti-affinity selects %s=%s, which the pods do not carry", k, v)
			}
		}
	}

	hs := decodeAs[*corev1.Service](t, d, find(ms, "Service", "rel-bulkhead-headless")[0])
	if hs.Spec.ClusterIP != corev1.ClusterIPNone || len(hs.Spec.Ports) != 1 || hs.Spec.Ports[0].Name != "grpc" {
		t.Errorf("headless Service %+v, want clusterIP None and the grpc port only (scraped once, through rel-bulkhead)", hs.Spec)
	}
	snippet := decodeAs[*corev1.ConfigMap](t, d, find(ms, "ConfigMap", "rel-bulkhead-envoy")[0])
	if !strings.Contains(snippet.Data["bulkhead-envoy.yaml"], `address: "rel-bulkhead-headless.mesh.svc.cluster.local"`) {
		t.Error("the Envoy snippet's bulkhead cluster does not resolve the headless Service (every replica)")
	}

	pdb := decodeAs[*policyv1.PodDisruptionBudget](t, d, find(ms, "PodDisruptionBudget", "")[0])
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("PDB %+v, want maxUnavailable 1", pdb.Spec)
	}
}

// The ledger's variants render a configuration pkg/config accepts, with
// the Secrets where the daemon looks; the replica guard follows the backend.
func TestLedgerVariants(t *testing.T) {
	d := newDecoder(t)
	redis := "config.ledger.backend=redis,config.ledger.redis.address=redis:6379"
	tests := []struct {
		name    string
		set     string
		refused string // "" = renders
		check   func(t *testing.T, cfg *config.Config, spec corev1.PodSpec)
	}{
		{name: "memory, 2 replicas", set: "replicaCount=2",
			refused: `replicaCount 2 refused: with ledger "memory" every replica keeps its own permits`},
		{name: "memory named, 3 replicas", set: "replicaCount=3,config.ledger.backend=memory",
			refused: "3 replicas would each admit the full max_concurrent of every bulkhead (3x the intended limit)"},
		{name: "redis, 1 replica", set: redis, check: func(t *testing.T, cfg *config.Config, spec corev1.PodSpec) {
			if cfg.Ledger.Backend != config.LedgerRedis || cfg.Ledger.Redis.PasswordFile != "" {
				t.Errorf("ledger %+v", cfg.Ledger)
			}
			if spec.Affinity != nil {
				t.Errorf("affinity %+v with one replica, want none", spec.Affinity)
			}
		}},
		{name: "sentinel, 2 replicas", set: "replicaCount=2,config.ledger.backend=redis,config.ledger.redis.sentinel.master=mymaster," +
			"config.ledger.redis.sentinel.addresses={s-0.redis:26379,s-1.redis:26379},redis.sentinelPasswordSecret.name=sentinel," +
			"redis.passwordSecret.name=redis,redis.passwordSecret.key=redis-password",
			check: func(t *testing.T, cfg *config.Config, spec corev1.PodSpec) {
				s := cfg.Ledger.Redis.Sentinel
				if s.Master != "mymaster" || !slices.Equal(s.Addresses, []string{"s-0.redis:26379", "s-1.redis:26379"}) {
					t.Errorf("sentinel %+v", s)
				}
				if sec, key := mountedSecret(spec, s.PasswordFile); sec != "sentinel" || key != "password" {
					t.Errorf("sentinel.password_file %q served by %q/%q", s.PasswordFile, sec, key)
				}
				if sec, key := mountedSecret(spec, cfg.Ledger.Redis.PasswordFile); sec != "redis" || key != "redis-password" {
					t.Errorf("password_file %q served by %q/%q", cfg.Ledger.Redis.PasswordFile, sec, key)
				}
			}},
		{name: "redis cluster, 2 replicas", set: redis + ",replicaCount=2,config.ledger.redis.cluster=true",
			check: func(t *testing.T, cfg *config.Config, _ corev1.PodSpec) {
				if r := cfg.Ledger.Redis; !r.Cluster || r.Address != "redis:6379" || r.DB != 0 {
					t.Errorf("ledger.redis %+v, want cluster through redis:6379", r)
				}
			}},
		{name: "mutual TLS", set: redis + ",redis.tlsSecret.name=redis-mtls,redis.tlsSecret.certKey=tls.crt,redis.tlsSecret.keyKey=tls.key",
			check: func(t *testing.T, cfg *config.Config, spec corev1.PodSpec) {
				tls := cfg.Ledger.Redis.TLS
				for _, f := range []struct{ path, key string }{{tls.CAFile, "ca.crt"}, {tls.CertFile, "tls.crt"}, {tls.KeyFile, "tls.key"}} {
					if sec, key := mountedSecret(spec, f.path); sec != "redis-mtls" || key != f.key {
						t.Errorf("TLS file %q served by %q/%q, want redis-mtls/%s", f.path, sec, key, f.key)
					}
				}
				if !tls.Enabled {
					t.Error("tls.enabled false with a TLS Secret")
				}
			}},
		{name: "shares on redis, 2 replicas", set: redis + ",replicaCount=2,bulkheads.catalog.shares.mode=auto",
			check: func(t *testing.T, cfg *config.Config, _ corev1.PodSpec) {
				if m := cfg.Bulkheads["catalog"].Shares.Mode; m != shares.Auto || !cfg.Ledger.Redis.CapacityLeases {
					t.Errorf("catalog's shares mode %v, capacity leases %v: want auto, held from capacity leases", m, cfg.Ledger.Redis.CapacityLeases)
				}
			}},
		{name: "own affinity kept", set: redis + ",replicaCount=2,affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool," +
			"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
			check: func(t *testing.T, _ *config.Config, spec corev1.PodSpec) {
				if a := spec.Affinity; a == nil || a.NodeAffinity == nil || a.PodAntiAffinity != nil {
					t.Errorf("affinity %+v, want the values' own only", a)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"template", "rel", chartDir(t), "--namespace", "mesh", "--kube-version", kubeVersion,
				"--set", "bulkheads.catalog.max_concurrent=10", "--set", tt.set}
			if tt.refused != "" {
				out, err := helm(t, args...)
				if err == nil || !strings.Contains(out, tt.refused) {
					t.Errorf("helm template: err %v, want a refusal with %q:\n%s", err, tt.refused, out)
				}
				return
			}
			ms := render(t, "", "--set", "bulkheads.catalog.max_concurrent=10", "--set", tt.set)
			for _, m := range ms {
				if _, err := d.decode(m); err != nil {
					t.Errorf("%s: %v", m, err)
				}
			}
			dep := decodeAs[*appsv1.Deployment](t, d, find(ms, "Deployment", "")[0])
			tt.check(t, daemonConfig(t, d, ms), dep.Spec.Template.Spec)
		})
	}
}

// on_unavailable local_share, deprecated, still passes the chart's schema
// (the daemon accepts it): the daemon reads it as capacity leases with
// fail_closed, and warns.
func TestRedisLedgerLocalShareDeprecated(t *testing.T) {
	d := newDecoder(t)
	ms := render(t, filepath.Join(chartDir(t), "ci", "redis-values.yaml"),
		"--set", "config.ledger.on_unavailable=local_share")
	cfg := daemonConfig(t, d, ms)
	if l := cfg.Ledger; l.OnUnavailable != admission.FailClosed || !l.Redis.CapacityLeases {
		t.Errorf("on_unavailable %v capacity_leases %v, want fail_closed, true", l.OnUnavailable, l.Redis.CapacityLeases)
	}
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "ledger.on_unavailable: is deprecated") {
		t.Errorf("warnings %q, want the deprecation of local_share", cfg.Warnings)
	}
}

// Every ledger.* key the daemon accepts has a place in the values schema
// (config.ledger, additionalProperties false), so a user can set it through
// the chart: the schema refuses what it does not name.
func TestSchemaNamesEveryConfigKey(t *testing.T) {
	// Keys the daemon accepts that the chart deliberately leaves out of
	// config (by prefix).
	absent := map[string]string{
		"ledger.local_share_for": "deprecated: accepted with a warning and without effect",
		"listen.grpc_tls.":       "the chart writes the TLS files from grpcTLS.secret",
		"admin.":                 "the chart writes token_file from admin.tokenSecret and tls.* from admin.tlsSecret",
	}
	// Keys the chart writes itself (exact): the addresses, from ports.*.
	own := map[string]bool{"listen.grpc": true, "listen.http": true, "listen.admin": true}
	left := func(key string) bool {
		if own[key] {
			return true
		}
		for p := range absent {
			if strings.HasPrefix(key, p) {
				return true
			}
		}
		return false
	}
	raw, err := os.ReadFile(filepath.Join(chartDir(t), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	type node struct {
		Properties map[string]*node `json:"properties"`
	}
	var root node
	if err := json.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, key := range config.Keys() {
		if left(key) {
			continue
		}
		n++
		at := root.Properties["config"]
		for _, part := range strings.Split(key, ".") {
			if at != nil {
				at = at.Properties[part]
			}
		}
		if at == nil {
			t.Errorf("the daemon's %s has no place in values.schema.json (config.%s): the chart refuses it", key, key)
		}
	}
	if n == 0 {
		t.Fatal("config.Keys() lists no key the chart offers")
	}
}
