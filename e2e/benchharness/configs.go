package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"text/template"

	"github.com/bulkhead-mesh/bulkhead/envoy"
)

// Config names: the four configurations of the issue, then the diagnostic
// one that separates Envoy's access-log cost from the bulkhead's own.
const (
	Floor    = "floor"
	Noop     = "noop-authz"
	Bulkhead = "bulkhead"
	Breaker  = "envoy-breaker"
	NoopALS  = "noop-authz+als"
	Batched  = "bulkhead-batched"
)

// routeName is the upstream cluster, the bulkhead key and the metric label.
const routeName = "bench"

// limit is the bulkhead's max_concurrent and the breaker's max_requests:
// far above the concurrency the load reaches, so that no configuration
// rejects and every one measures its overhead only.
const limit = 1000

// configSpec says how a configuration is built.
type configSpec struct {
	Name    string
	Title   string // one line for the report
	sidecar string // "", "noop", "noop-metadata" or "daemon": the gRPC server Envoy calls
	// The template's knobs (unused for Bulkhead, rendered by package envoy).
	extAuthz, accessLog bool
	maxRequests         int
	// batched: the shipped configuration with the access log buffered.
	batched bool
	// diagnostic configurations are not run at the floor's rates (beyond
	// what any ext_authz configuration carries on a small machine).
	diagnostic bool
}

// configSpecs returns the configurations in run order; the floor is first
// because the open-loop rates derive from its maximum.
func configSpecs(diagnostic bool) []configSpec {
	specs := []configSpec{
		{Name: Floor, Title: "Envoy straight to the upstream (no filter, no access log)"},
		{Name: Noop, Title: "Envoy + ext_authz to a no-op server (bare ext_authz hop)", sidecar: "noop", extAuthz: true},
		{Name: Bulkhead, Title: "Envoy + the bulkhead (ext_authz + gRPC access log, envoy/front-proxy.yaml.tmpl)", sidecar: "daemon"},
		{Name: Breaker, Title: fmt.Sprintf("Envoy's own circuit breaker (cluster max_requests %d)", limit), maxRequests: limit},
	}
	if diagnostic {
		specs = append(specs, configSpec{Name: Batched,
			Title:   "diagnostic: the bulkhead with the access log batched (buffer_size_bytes 16384, buffer_flush_interval 1ms)",
			sidecar: "daemon", batched: true, diagnostic: true})
		specs = append(specs, configSpec{Name: NoopALS,
			Title:   "diagnostic: the bulkhead's protocol with a no-op server (ext_authz answering the same metadata + gRPC access log)",
			sidecar: "noop-metadata", extAuthz: true, accessLog: true, diagnostic: true})
	}
	return specs
}

//go:embed proxy.yaml.tmpl
var proxyTemplate string

var proxy = template.Must(template.New("proxy.yaml.tmpl").
	Funcs(template.FuncMap{"quote": func(s string) (string, error) {
		b, err := json.Marshal(s)
		return string(b), err
	}}).
	Option("missingkey=error").
	Parse(proxyTemplate))

// proxyParams are the inputs of proxy.yaml.tmpl.
type proxyParams struct {
	Name, Cluster       string
	Upstream, Sidecar   envoy.Endpoint
	ExtAuthz, AccessLog bool
	MaxRequests         int
}

// render returns the Envoy bootstrap of spec: upstream is the test
// upstream, sidecar the gRPC server of spec.sidecar.
func (spec configSpec) render(upstream, sidecar envoy.Endpoint) ([]byte, error) {
	if spec.sidecar == "daemon" {
		// The shipped configuration, exactly as users run it.
		b, err := envoy.Render(envoy.Params{
			ListenerPort: 0, AdminPort: 0, Bulkhead: sidecar,
			Routes: []envoy.Route{{Name: routeName, Prefix: "/", Upstream: upstream}},
		})
		if err != nil || !spec.batched {
			return b, err
		}
		const unbuffered = "buffer_size_bytes: 0\n"
		if bytes.Count(b, []byte(unbuffered)) != 1 {
			return nil, fmt.Errorf("render %s: want one %q in the shipped configuration", spec.Name, unbuffered)
		}
		i := bytes.Index(b, []byte(unbuffered))
		indent := b[bytes.LastIndexByte(b[:i], '\n')+1 : i]
		batched := fmt.Sprintf("buffer_size_bytes: 16384\n%sbuffer_flush_interval: 0.001s\n", indent)
		return bytes.Replace(b, []byte(unbuffered), []byte(batched), 1), nil
	}
	p := proxyParams{Name: spec.Name, Cluster: routeName, Upstream: upstream,
		ExtAuthz: spec.extAuthz, AccessLog: spec.accessLog, MaxRequests: spec.maxRequests}
	if spec.sidecar != "" {
		p.Sidecar = sidecar
	}
	var buf bytes.Buffer
	if err := proxy.Execute(&buf, p); err != nil {
		return nil, fmt.Errorf("render %s: %w", spec.Name, err)
	}
	return buf.Bytes(), nil
}

// daemonConfig is the bulkhead daemon's configuration for the benchmark.
func daemonConfig() string {
	return fmt.Sprintf(`listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
log: {level: info}
bulkheads:
  %s: {max_concurrent: %d, max_queue: %d, max_wait: 500ms}
`, routeName, limit, limit)
}
