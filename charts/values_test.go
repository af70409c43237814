package charts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad values are refused, by `helm lint` and by `helm template` alike, with
// a message that names the value and the problem. (The ledger guards are
// template fails: helm template refuses, helm lint prints the same message
// without failing, as helm lint does for every fail.)
func TestBadValuesRefused(t *testing.T) {
	tests := map[string][]string{
		"replicas-2.yaml": {`replicaCount 2 refused: with ledger "memory" every replica keeps its own permits`,
			"2x the intended limit", "Set config.ledger.backend: redis"},
		"zero-limit.yaml":                     {"/bulkheads/catalog/max_concurrent", "minimum: got 0, want 1"},
		"missing-limit.yaml":                  {"/bulkheads/catalog", "missing property 'max_concurrent'"},
		"misspelt-field.yaml":                 {"additional properties 'max_concurent' not allowed"},
		"uppercase-name.yaml":                 {"invalid propertyName 'Catalog'", "does not match pattern"},
		"bad-duration.yaml":                   {"/bulkheads/catalog/max_wait", "'half a second' does not match pattern"},
		"reserve-over-one.yaml":               {"/bulkheads/catalog/reserve/critical", "maximum: got 1.5, want 1"},
		"bad-priority.yaml":                   {"/bulkheads/catalog/priority", "value must be one of 'critical', 'normal', 'best_effort'"},
		"deny-status-200.yaml":                {"/config/authz/deny_status", "minimum: got 200, want 400"},
		"bad-unknown-policy.yaml":             {"/config/authz/unknown_bulkhead", "value must be one of 'deny', 'allow', 'default'"},
		"listen-in-config.yaml":               {"/config/listen", "additional properties 'grpc' not allowed"},
		"admin-without-token.yaml":            {"/admin/tokenSecret/name", "minLength"},
		"ledger-top-level.yaml":               {"ledger: moved to config.ledger.backend"},
		"ledger-backend-etcd.yaml":            {"/config/ledger/backend", "value must be one of 'memory', 'redis'"},
		"redis-without-address.yaml":          {"config.ledger.backend is redis: set config.ledger.redis.address"},
		"redis-password-twice.yaml":           {"config.ledger.redis.password_file and redis.passwordSecret are both set"},
		"redis-tls-cert-without-key.yaml":     {"/redis/tlsSecret/keyKey", "minLength"},
		"redis-prefix-brace.yaml":             {"/config/ledger/redis/key_prefix", "does not match pattern"},
		"redis-cluster-db.yaml":               {"/config/ledger/redis/db", "value must be 0"},
		"redis-cluster-sentinel.yaml":         {"config.ledger.redis.cluster and config.ledger.redis.sentinel are both set"},
		"istio-bad-access-log.yaml":           {"/istio/accessLog", "value must be one of 'envoyFilter', 'telemetry'"},
		"istio-without-selector.yaml":         {"/bulkheads/catalog/istio", "missing property 'selector'"},
		"heartbeat-interval-ms.yaml":          {"/config/leases/heartbeat_interval", "'500ms' does not match pattern"},
		"node-grace.yaml":                     {"/config/leases", "additional properties 'node_grace' not allowed"},
		"shares-without-capacity-leases.yaml": {"bulkheads.search.shares.mode auto: shares on the Redis ledger are held from capacity leases"},
		"shares-max-request-ms.yaml":          {"/config/shares/max_request_duration", "'500ms' does not match pattern"},
		"shares-classes-best-effort.yaml":     {"/bulkheads/orders/shares/classes/0", "value must be one of 'normal', 'critical'"},
		"shares-classes-strict.yaml":          {"bulkheads.orders.shares.classes renders share route pairs: it needs shares.mode shares or auto"},
	}
	// Refused by a template's fail, not by the schema.
	templateFails := map[string]bool{
		"replicas-2.yaml": true, "ledger-top-level.yaml": true, "redis-without-address.yaml": true, "redis-password-twice.yaml": true,
		"shares-without-capacity-leases.yaml": true, "redis-cluster-sentinel.yaml": true, "shares-classes-strict.yaml": true,
	}
	files, err := filepath.Glob(filepath.Join("testdata", "bad", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(tests) {
		t.Errorf("%d files in testdata/bad, %d test cases: every bad values file needs its expected message", len(files), len(tests))
	}
	for _, f := range files {
		name := filepath.Base(f)
		want, ok := tests[name]
		if !ok {
			t.Errorf("%s: no expected message", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			abs, err := filepath.Abs(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, cmd := range [][]string{
				{"lint", "--strict", chartDir(t), "--kube-version", kubeVersion, "--values", abs},
				{"template", "rel", chartDir(t), "--kube-version", kubeVersion, "--values", abs},
			} {
				out, err := helm(t, cmd...)
				// helm lint renders in "lint mode", where a template's fail
				// is reported ("[INFO] Fail: ...") but does not fail the
				// lint; the schema's refusals do fail it.
				lintOnlyReports := cmd[0] == "lint" && templateFails[name]
				if err == nil && !lintOnlyReports {
					t.Errorf("helm %s accepted %s:\n%s", cmd[0], name, out)
					continue
				}
				for _, w := range want {
					if !strings.Contains(out, w) {
						t.Errorf("helm %s: output lacks %q:\n%s", cmd[0], w, out)
					}
				}
			}
		})
	}
}

// The bad values differ from good ones only in what they test: each is a
// small file, and the chart's own ci values all pass (TestHelmLint), so a
// refusal above is the schema's or the template's, not an accident.
func TestBadValuesAreSmall(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "bad", "*.yaml"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n > 5 {
			t.Errorf("%s: %d lines; keep bad values files to the one thing they test", f, n)
		}
	}
}
