//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
)

// Envoy Gateway's offline translator: egctl, built by `make egctl` into
// .bin/egctl-$(EGCTL_VERSION) (the Makefile's EGCTL_VERSION, which must
// equal egctlVersion).
const egctlVersion = "v1.9.1"

// egResources is the recipe docs/envoy-gateway.md tells users to apply.
var egResources = filepath.Join("..", "deploy", "envoy-gateway", "bulkhead.yaml")

// findEgctl returns egctl ($EGCTL_BIN, else .bin/egctl-<egctlVersion>).
// Without it the test is skipped, or fails with BULKHEAD_REQUIRE_EGCTL=1
// (as in `make test`).
func findEgctl(t *testing.T) string {
	t.Helper()
	p := os.Getenv("EGCTL_BIN")
	if p == "" {
		p = filepath.Join("..", ".bin", "egctl-"+egctlVersion)
	}
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	if os.Getenv("BULKHEAD_REQUIRE_EGCTL") == "1" {
		t.Fatalf("egctl not found at %s and BULKHEAD_REQUIRE_EGCTL=1: make egctl builds it (about 5 min)", p)
	}
	t.Skipf("egctl not found at %s: make egctl builds it (BULKHEAD_REQUIRE_EGCTL=1 makes this a failure)", p)
	return ""
}

// egTranslation is what `egctl x translate --to gateway-api,xds -o json`
// prints: the input resources with the statuses Envoy Gateway gave them,
// and per Gateway (key namespace/name) the xDS it would serve, as an Envoy
// config dump.
type egTranslation struct {
	resources map[string]any
	xds       map[string][]any // gateway -> config dump entries
}

// translate runs Envoy Gateway's translator on the resources in yaml, and
// fails the test if it refuses them.
func translate(t *testing.T, egctl string, yaml []byte) egTranslation {
	t.Helper()
	tr, err := tryTranslate(egctl, yaml)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// tryTranslate runs Envoy Gateway's translator on the resources in yaml.
// It refuses (an error) resources that Envoy Gateway's CRDs refuse (their
// OpenAPI schemas and CEL rules, checked by the translator before anything
// else) and xDS that fails Envoy's proto validation.
func tryTranslate(egctl string, yaml []byte) (egTranslation, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// --add-missing-resources gives each Service a cluster IP (1.2.3.4), as
	// Kubernetes would: without one the translator makes endpoints with no
	// address. Only the address is rewritten later.
	cmd := exec.CommandContext(ctx, egctl, "x", "translate", "--from", "gateway-api", "--to", "gateway-api,xds",
		"-t", "all", "-o", "json", "--add-missing-resources", "-f", "-")
	cmd.Stdin = bytes.NewReader(yaml)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return egTranslation{}, fmt.Errorf("egctl x translate: %w\n%s", err, tail(stderr.String(), 4000))
	}
	var raw map[string]any
	if err := json.Unmarshal(out, &raw); err != nil {
		return egTranslation{}, fmt.Errorf("egctl x translate printed no JSON: %w\n%s", err, tail(string(out), 2000))
	}
	tr := egTranslation{resources: raw, xds: map[string][]any{}}
	xds, _ := raw["xds"].(map[string]any)
	for gw, v := range xds {
		configs, _ := v.(map[string]any)["configs"].([]any)
		tr.xds[gw] = configs
	}
	delete(raw, "xds")
	return tr, nil
}

// egKinds are the kinds of the recipe that Envoy Gateway gives a status;
// each must be there and accepted.
var egKinds = map[string]string{
	"gatewayClass": "GatewayClass", "gateways": "Gateway", "httpRoutes": "HTTPRoute",
	"securityPolicies": "SecurityPolicy", "envoyPatchPolicies": "EnvoyPatchPolicy",
}

// statusProblems lists what Envoy Gateway refused or did not resolve: a
// kind of egKinds missing, an object of one without an Accepted condition,
// and any condition (of any object, any ancestor or listener) whose status
// is not "True". The translator reports these only in statuses: its exit
// code is 0 whatever it dropped.
func (tr egTranslation) statusProblems() []string {
	var problems []string
	for key, kind := range egKinds {
		objs, ok := tr.resources[key].([]any)
		if one, single := tr.resources[key].(map[string]any); single {
			objs, ok = []any{one}, true
		}
		if !ok || len(objs) == 0 {
			problems = append(problems, kind+": none in the translation")
			continue
		}
		for _, o := range objs {
			obj, _ := o.(map[string]any)
			meta, _ := obj["metadata"].(map[string]any)
			name := fmt.Sprintf("%s %v/%v", kind, meta["namespace"], meta["name"])
			accepted := false
			walkConditions(obj["status"], func(c map[string]any) {
				if c["status"] != "True" {
					problems = append(problems, fmt.Sprintf("%s: %v %v: %v", name, c["type"], c["reason"], c["message"]))
				}
				if c["type"] == "Accepted" && c["status"] == "True" {
					accepted = true
				}
			})
			if !accepted {
				problems = append(problems, name+": not accepted (no Accepted condition)")
			}
		}
	}
	sort.Strings(problems)
	return problems
}

// walkConditions calls f on every element of every "conditions" list under v.
func walkConditions(v any, f func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if cs, ok := x.([]any); ok && k == "conditions" {
				for _, c := range cs {
					if c, ok := c.(map[string]any); ok {
						f(c)
					}
				}
				continue
			}
			walkConditions(x, f)
		}
	case []any:
		for _, x := range v {
			walkConditions(x, f)
		}
	}
}

// staticBootstrap turns one Gateway's translated xDS into a bootstrap Envoy
// runs without Envoy Gateway: its listeners, their route configurations
// (inlined in place of RDS) and its clusters, each EDS cluster made static
// with its translated endpoints, whose address is moved to the one backends
// gives for the endpoint's Service ("namespace/name"); the listeners on
// 127.0.0.1, port 0. Kept from Envoy Gateway's own bootstrap: its runtime
// layer and overload manager; dropped: the xDS server it would connect to,
// its stats and readiness listeners' static parts, and its admin address
// (127.0.0.1:0 here).
func staticBootstrap(dump []any, backends map[string]envoy.Endpoint) (map[string]any, error) {
	var eg map[string]any
	routes, loads := map[string]map[string]any{}, map[string]map[string]any{}
	var listeners, clusters []any
	var errs []error
	for _, c := range dump {
		c, _ := c.(map[string]any)
		switch c["@type"] {
		case "type.googleapis.com/envoy.admin.v3.BootstrapConfigDump":
			eg, _ = c["bootstrap"].(map[string]any)
		case "type.googleapis.com/envoy.admin.v3.RoutesConfigDump":
			for _, r := range list(c["dynamicRouteConfigs"]) {
				rc := strip(obj(r)["routeConfig"])
				routes[fmt.Sprint(rc["name"])] = rc
			}
		case "type.googleapis.com/envoy.admin.v3.EndpointsConfigDump":
			for _, e := range list(c["dynamicEndpointConfigs"]) {
				cla := strip(obj(e)["endpointConfig"])
				loads[fmt.Sprint(cla["clusterName"])] = cla
			}
		case "type.googleapis.com/envoy.admin.v3.ClustersConfigDump":
			for _, cl := range list(c["dynamicActiveClusters"]) {
				clusters = append(clusters, strip(obj(cl)["cluster"]))
			}
		case "type.googleapis.com/envoy.admin.v3.ListenersConfigDump":
			for _, l := range list(c["dynamicListeners"]) {
				listeners = append(listeners, strip(obj(obj(l)["activeState"])["listener"]))
			}
		}
	}
	for _, l := range listeners {
		l := obj(l)
		l["address"] = map[string]any{"socketAddress": map[string]any{"address": "127.0.0.1", "portValue": 0}}
		chains := list(l["filterChains"])
		if d, ok := l["defaultFilterChain"]; ok {
			chains = append(chains, d)
		}
		for _, ch := range chains {
			for _, f := range list(obj(ch)["filters"]) {
				hcm := obj(obj(f)["typedConfig"])
				rds, ok := hcm["rds"].(map[string]any)
				if !ok {
					continue
				}
				name := fmt.Sprint(rds["routeConfigName"])
				rc, ok := routes[name]
				if !ok {
					errs = append(errs, fmt.Errorf("listener %v: route configuration %q not in the translation", l["name"], name))
				}
				delete(hcm, "rds")
				hcm["routeConfig"] = rc
			}
		}
	}
	for _, cl := range clusters {
		cl := obj(cl)
		if cl["type"] != "EDS" {
			continue
		}
		name := fmt.Sprint(cl["name"])
		cla, ok := loads[name]
		if !ok {
			errs = append(errs, fmt.Errorf("cluster %s: no endpoints in the translation", name))
			continue
		}
		for _, le := range list(cla["endpoints"]) {
			svc := endpointService(obj(le))
			to, ok := backends[svc]
			if !ok {
				errs = append(errs, fmt.Errorf("cluster %s: endpoints of Service %q, which the test does not run", name, svc))
				continue
			}
			for _, lb := range list(obj(le)["lbEndpoints"]) {
				obj(obj(lb)["endpoint"])["address"] = map[string]any{
					"socketAddress": map[string]any{"address": to.Host, "portValue": to.Port}}
			}
		}
		delete(cl, "edsClusterConfig")
		cl["type"] = "STATIC"
		cl["loadAssignment"] = cla
	}
	if eg == nil {
		errs = append(errs, errors.New("no bootstrap in the translation"))
	}
	return map[string]any{
		"node":            map[string]any{"id": "envoy-gateway-e2e", "cluster": "envoy-gateway-e2e"},
		"admin":           map[string]any{"address": map[string]any{"socketAddress": map[string]any{"address": "127.0.0.1", "portValue": 0}}},
		"layeredRuntime":  eg["layeredRuntime"],
		"overloadManager": eg["overloadManager"],
		"staticResources": map[string]any{"listeners": listeners, "clusters": clusters},
	}, errors.Join(errs...)
}

// accessLogProblems lists what the EnvoyPatchPolicy should have put on the
// connection manager of the Gateway's listener and did not: the flush
// interval of the periodic entries (interval, the daemon's
// leases.heartbeat_interval), the release logger "bulkhead" unbuffered and
// filtered, the heartbeat logger "bulkhead-heartbeat" filtered. Envoy
// Gateway accepts a patch aimed at a listener it does not generate and
// applies nothing (the status that says so is not in egctl's output).
func accessLogProblems(bootstrap map[string]any, listener, interval string) []string {
	var hcm map[string]any
	for _, l := range list(obj(bootstrap["staticResources"])["listeners"]) {
		if obj(l)["name"] != listener {
			continue
		}
		for _, ch := range append(list(obj(l)["filterChains"]), obj(l)["defaultFilterChain"]) {
			for _, f := range list(obj(ch)["filters"]) {
				if obj(f)["name"] == "envoy.filters.network.http_connection_manager" {
					hcm = obj(obj(f)["typedConfig"])
				}
			}
		}
	}
	if hcm == nil {
		return []string{"listener " + listener + ": no HTTP connection manager"}
	}
	var problems []string
	if got := obj(hcm["accessLogOptions"])["accessLogFlushInterval"]; got != interval {
		problems = append(problems, fmt.Sprintf("access_log_flush_interval %v, want %s", got, interval))
	}
	loggers := map[string]map[string]any{}
	for _, al := range list(hcm["accessLog"]) {
		common := obj(obj(obj(al)["typedConfig"])["commonConfig"])
		loggers[fmt.Sprint(common["logName"])] = obj(al)
	}
	release, heartbeat := loggers["bulkhead"], loggers["bulkhead-heartbeat"]
	switch {
	case release == nil:
		problems = append(problems, "no access logger named bulkhead")
	case obj(obj(release["typedConfig"])["commonConfig"])["bufferSizeBytes"] != float64(0):
		problems = append(problems, "the release logger is buffered (buffer_size_bytes not 0)")
	case release["filter"] == nil:
		problems = append(problems, "the release logger has no filter")
	}
	switch {
	case heartbeat == nil:
		problems = append(problems, "no access logger named bulkhead-heartbeat")
	case !strings.Contains(fmt.Sprint(heartbeat["filter"]), "DownstreamPeriodic"):
		problems = append(problems, "the heartbeat logger takes more than the periodic entries")
	}
	return problems
}

// endpointService is the Service ("namespace/name") Envoy Gateway records
// in a locality's metadata (filterMetadata["envoy-gateway"].resources).
func endpointService(le map[string]any) string {
	md := obj(obj(obj(le["metadata"])["filterMetadata"])["envoy-gateway"])
	for _, r := range list(md["resources"]) {
		if r := obj(r); r["kind"] == "Service" {
			return fmt.Sprintf("%v/%v", r["namespace"], r["name"])
		}
	}
	return ""
}

// httpFilters names the HTTP filters of every connection manager of the
// bootstrap's listeners, for the log.
func httpFilters(bootstrap map[string]any) []string {
	var names []string
	for _, l := range list(obj(bootstrap["staticResources"])["listeners"]) {
		chains := append(list(obj(l)["filterChains"]), obj(l)["defaultFilterChain"])
		for _, ch := range chains {
			for _, f := range list(obj(ch)["filters"]) {
				for _, h := range list(obj(obj(f)["typedConfig"])["httpFilters"]) {
					names = append(names, fmt.Sprintf("%v: %v", obj(l)["name"], obj(h)["name"]))
				}
			}
		}
	}
	return names
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	if m == nil {
		return map[string]any{}
	}
	return m
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// strip drops a config dump entry's "@type" (a bootstrap's resources are
// typed by their place).
func strip(v any) map[string]any {
	m := obj(v)
	delete(m, "@type")
	return m
}

// yamlWithout returns the recipe with old replaced by new exactly once,
// for the negative checks; it fails the test when old is not there once.
func yamlWithout(t *testing.T, yaml []byte, old, new string) []byte {
	t.Helper()
	if n := strings.Count(string(yaml), old); n != 1 {
		t.Fatalf("the recipe has %q %d times, want once", old, n)
	}
	return []byte(strings.Replace(string(yaml), old, new, 1))
}
