package deploy

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc/envoyproctest"
)

var update = flag.Bool("update", false, "rewrite the generated files the tests run check (with -run: deploy/compose/envoy.yaml, charts/bulkhead/README.md)")

const composeEnvoyPath = "deploy/compose/envoy.yaml"

// composeEnvoyParams are the Envoy parameters of docker-compose.yaml: the
// demo routes, with the containers' names as hosts, and both Bulkhead
// replicas in the cluster "bulkhead".
func composeEnvoyParams() envoy.Params {
	return envoy.Params{
		ListenerAddress:  "0.0.0.0",
		ListenerPort:     10000,
		AdminAddress:     "0.0.0.0",
		AdminPort:        9901,
		Bulkhead:         envoy.Endpoint{Host: "bulkhead", Port: 9001},
		BulkheadReplicas: []envoy.Endpoint{{Host: "bulkhead-2", Port: 9001}},
		Routes: envoy.DemoRoutes(
			envoy.Endpoint{Host: "catalog", Port: 8081},
			envoy.Endpoint{Host: "auth", Port: 8082},
			envoy.Endpoint{Host: "orders", Port: 8083},
		),
	}
}

// The Envoy config docker-compose mounts is the template's output (run
// with -update to regenerate it).
func TestComposeEnvoyConfigUpToDate(t *testing.T) {
	want, err := envoy.Render(composeEnvoyParams())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(repoRoot(t), composeEnvoyPath)
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: go test ./deploy -run ComposeEnvoy -update", composeEnvoyPath)
	}
	if !bytes.Contains(got, []byte("buffer_size_bytes: 0")) {
		t.Errorf("%s: the access log must flush every entry (buffer_size_bytes: 0)", composeEnvoyPath)
	}
	if !bytes.Contains(got, []byte("log_name: bulkhead-heartbeat")) {
		t.Errorf("%s: the periodic entries must have their own, batched logger", composeEnvoyPath)
	}
}

// docker-compose.yaml loads with the compose-spec loader (what docker
// compose uses), and everything it refers to exists and fits together.
func TestComposeProject(t *testing.T) {
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yaml")},
		cli.WithWorkingDirectory(root), cli.WithResolvedPaths(true), cli.WithConsistency(true), cli.WithEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(ctx)
	if err != nil {
		t.Fatalf("docker-compose.yaml does not load: %v", err)
	}

	want := []string{"auth", "bulkhead", "bulkhead-2", "catalog", "envoy", "grafana", "orders", "prometheus", "redis", "traffic"}
	if got := p.ServiceNames(); !slices.Equal(sorted(got), want) {
		t.Fatalf("services %q, want %q", got, want)
	}
	published := map[string]string{}
	for name, s := range p.Services {
		// Every image is pinned: no floating tags.
		if s.Build == nil && (s.Image == "" || !strings.Contains(s.Image, ":") || strings.HasSuffix(s.Image, ":latest")) {
			t.Errorf("%s: image %q is not pinned to a version", name, s.Image)
		}
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s: mounts %s: %v", name, v.Source, err)
			}
			if !v.ReadOnly {
				t.Errorf("%s: mount %s is writable; configuration mounts are read-only", name, v.Target)
			}
		}
		for _, port := range s.Ports {
			if other, dup := published[port.Published]; dup {
				t.Errorf("host port %s published by %s and %s", port.Published, other, name)
			}
			published[port.Published] = name
		}
	}

	bh := p.Services["bulkhead"]
	if bh.Build == nil {
		t.Fatal("bulkhead: not built from the repository")
	}
	if _, err := os.Stat(filepath.Join(bh.Build.Context, bh.Build.Dockerfile)); err != nil {
		t.Errorf("bulkhead: Dockerfile: %v", err)
	}
	if !bh.ReadOnly || bh.User == "" || strings.HasPrefix(bh.User, "0") {
		t.Errorf("bulkhead: read_only %v user %q: want a read-only, non-root container", bh.ReadOnly, bh.User)
	}
	if img := p.Services["envoy"].Image; !strings.HasPrefix(img, "envoyproxy/envoy:v1.40") {
		t.Errorf("envoy: image %q, want the official Envoy 1.40 image", img)
	}

	// The mounted files are the shared artifacts, and each is valid.
	mounts := map[string]string{} // target -> source
	for _, s := range p.Services {
		for _, v := range s.Volumes {
			mounts[v.Target] = v.Source
		}
	}
	for target, rel := range map[string]string{
		"/etc/bulkhead/bulkhead.yaml":                        "deploy/compose/bulkhead.yaml",
		"/etc/envoy/envoy.yaml":                              composeEnvoyPath,
		"/etc/prometheus/prometheus.yml":                     "deploy/compose/prometheus/prometheus.yml",
		"/etc/prometheus/rules/bulkhead.rules.yaml":          rulesPath,
		"/var/lib/grafana/dashboards/bulkhead/bulkhead.json": dashboardPath,
		"/etc/grafana/provisioning/datasources":              "deploy/compose/grafana/provisioning/datasources",
		"/etc/grafana/provisioning/dashboards":               "deploy/compose/grafana/provisioning/dashboards",
	} {
		if got := mounts[target]; got != filepath.Join(root, rel) {
			t.Errorf("%s: mounted from %q, want %s", target, got, rel)
		}
	}
	cfg, err := config.Parse("deploy/compose/bulkhead.yaml", readRepoFile(t, "deploy/compose/bulkhead.yaml"))
	if err != nil {
		t.Fatalf("the compose bulkhead config is refused: %v", err)
	}
	for _, r := range composeEnvoyParams().Routes {
		if _, ok := cfg.Bulkheads[r.BulkheadName()]; !ok {
			t.Errorf("Envoy route %s names bulkhead %s, which the compose config lacks", r.Prefix, r.BulkheadName())
		}
		up, ok := p.Services[r.Upstream.Host]
		if !ok {
			t.Errorf("Envoy route %s goes to %s, which is no compose service", r.Prefix, r.Upstream.Host)
			continue
		}
		// The upstream is bulkhead-demo's, on the port Envoy sends to (the
		// commands are parsed by cmd/bulkhead-demo's TestComposeCommands).
		listen := fmt.Sprintf(":%d", r.Upstream.Port)
		if cmd := up.Command; len(cmd) < 2 || cmd[0] != "upstream" || cmd[1] != r.Upstream.Host || !slices.Contains(cmd, listen) {
			t.Errorf("%s: command %q, want bulkhead-demo upstream %s --listen %s", r.Upstream.Host, cmd, r.Upstream.Host, listen)
		}
	}
	// The demo's upstreams and traffic are the Dockerfile's stage demo
	// (bulkhead-demo), so they can be slowed like the local demo's.
	for _, name := range []string{"catalog", "auth", "orders", "traffic"} {
		s := p.Services[name]
		if s.Build == nil || s.Build.Target != "demo" || !s.ReadOnly || s.User == "" || strings.HasPrefix(s.User, "0") {
			t.Errorf("%s: want built from the Dockerfile's stage demo, read-only, non-root (build %+v)", name, s.Build)
		}
	}
	if !regexp.MustCompile(`(?m)^FROM \S+ AS demo\n(.*\n)*?ENTRYPOINT \["/usr/local/bin/bulkhead-demo"\]`).Match(readRepoFile(t, "Dockerfile")) {
		t.Error("the Dockerfile has no stage demo whose entrypoint is bulkhead-demo")
	}
	if !strings.HasSuffix(cfg.Listen.GRPC, ":9001") || !strings.HasPrefix(cfg.Listen.HTTP, "0.0.0.0:") {
		t.Errorf("compose bulkhead listens on %+v: want all interfaces, gRPC on 9001", cfg.Listen)
	}
	checkComposeReplicas(t, p, cfg)
	// Grafana's dashboard provider reads the directory the dashboard is mounted in.
	prov := string(readRepoFile(t, "deploy/compose/grafana/provisioning/dashboards/bulkhead.yaml"))
	if !strings.Contains(prov, "path: /var/lib/grafana/dashboards/bulkhead") {
		t.Error("the Grafana dashboard provider does not read /var/lib/grafana/dashboards/bulkhead")
	}
	ds := string(readRepoFile(t, "deploy/compose/grafana/provisioning/datasources/prometheus.yaml"))
	if !strings.Contains(ds, "url: http://prometheus:9090") {
		t.Error("the Grafana datasource does not point at the prometheus service")
	}
}

// checkComposeReplicas: every endpoint of Envoy's bulkhead cluster is a
// replica built from the repository with the one compose config, which keeps
// permits in the compose Redis; that Redis persists nothing (as in e2e: a
// restart loses the ledger and heartbeats rebuild it).
func checkComposeReplicas(t *testing.T, p *types.Project, cfg *config.Config) {
	t.Helper()
	eps := composeEnvoyParams().BulkheadEndpoints()
	if len(eps) < 2 {
		t.Errorf("Envoy's bulkhead cluster has %d endpoint(s), want the two replicas", len(eps))
	}
	for _, e := range eps {
		s, ok := p.Services[e.Host]
		if !ok {
			t.Errorf("Envoy's bulkhead cluster lists %s, which is no compose service", e.Host)
			continue
		}
		if s.Build == nil || s.Image != p.Services["bulkhead"].Image {
			t.Errorf("%s: image %q, build %v: want the bulkhead image, built from the repository", e.Host, s.Image, s.Build)
		}
		var mounted bool
		for _, v := range s.Volumes {
			mounted = mounted || v.Target == "/etc/bulkhead/bulkhead.yaml" && strings.HasSuffix(v.Source, "deploy/compose/bulkhead.yaml")
		}
		if !mounted {
			t.Errorf("%s: does not mount deploy/compose/bulkhead.yaml", e.Host)
		}
		if _, ok := s.DependsOn["redis"]; !ok {
			t.Errorf("%s: does not depend on redis", e.Host)
		}
	}
	if cfg.Ledger.Backend != config.LedgerRedis {
		t.Fatalf("compose bulkhead ledger %v: two replicas need the redis backend", cfg.Ledger.Backend)
	}
	host, _, _ := strings.Cut(cfg.Ledger.Redis.Address, ":")
	r, ok := p.Services[host]
	if !ok {
		t.Fatalf("ledger.redis.address %q: no compose service %s", cfg.Ledger.Redis.Address, host)
	}
	if !strings.HasPrefix(r.Image, "redis:7") {
		t.Errorf("%s: image %q, want redis:7", host, r.Image)
	}
	if cmd := strings.Join(r.Command, " "); !strings.Contains(cmd, `--save  --appendonly no`) {
		t.Errorf("%s: command %q, want no persistence (--save \"\" --appendonly no)", host, r.Command)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// A real Envoy accepts the compose Envoy config.
func TestComposeEnvoyConfigValidates(t *testing.T) {
	bin := envoyproctest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--mode", "validate", "--config-path",
		filepath.Join(repoRoot(t), composeEnvoyPath), "--log-level", "warn").CombinedOutput()
	if err != nil {
		t.Fatalf("envoy --mode validate %s: %v\n%s", composeEnvoyPath, err, out)
	}
}
