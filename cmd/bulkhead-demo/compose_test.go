package main

import (
	"context"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
)

// docker-compose.yaml's demo upstreams and traffic run commands this binary
// accepts, and they fit together: each upstream listens on its demo port
// (Envoy's, see deploy's TestComposeProject), traffic reaches every
// upstream's control API, Envoy and the daemon by their service names.
func TestComposeCommands(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yaml")},
		cli.WithWorkingDirectory(root), cli.WithEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(ctx)
	if err != nil {
		t.Fatal(err)
	}
	controlPorts := map[string]string{}
	for _, r := range demoRoutes {
		s, ok := p.Services[r.name]
		if !ok || len(s.Command) == 0 || s.Command[0] != "upstream" {
			t.Errorf("service %s: command %q, want bulkhead-demo upstream", r.name, s.Command)
			continue
		}
		o, err := parseUpstreamFlags(s.Command[1:], io.Discard)
		if err != nil {
			t.Errorf("service %s: %q: %v", r.name, s.Command, err)
			continue
		}
		_, demoPort, _ := net.SplitHostPort(r.upstream)
		if _, port, _ := net.SplitHostPort(o.listen); o.name != r.name || port != demoPort {
			t.Errorf("service %s serves upstream %s on %s, want %s on port %s", r.name, o.name, o.listen, r.name, demoPort)
		}
		_, controlPorts[r.name], _ = net.SplitHostPort(o.control)
	}

	s := p.Services["traffic"]
	if len(s.Command) == 0 || s.Command[0] != "traffic" {
		t.Fatalf("service traffic: command %q, want bulkhead-demo traffic", s.Command)
	}
	o, err := parseTrafficFlags(s.Command[1:], io.Discard)
	if err != nil {
		t.Fatalf("service traffic: %q: %v", s.Command, err)
	}
	hostOf := func(raw string) (string, string) {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return u.Hostname(), u.Port()
	}
	if host, port := hostOf(o.envoyURL); host != "envoy" || port != "10000" {
		t.Errorf("traffic --envoy %s, want the envoy service's listener (10000)", o.envoyURL)
	}
	if host, port := hostOf(o.metricsURL); host != "bulkhead" || port != "9090" {
		t.Errorf("traffic --metrics %s, want the bulkhead service's HTTP port (9090)", o.metricsURL)
	}
	for _, r := range demoRoutes {
		host, port := hostOf(o.control[r.name])
		if host != r.name || port != controlPorts[r.name] {
			t.Errorf("traffic --control %s=%s, want the %s service's control port %s", r.name, o.control[r.name], r.name, controlPorts[r.name])
		}
	}
	if o.slowAfter <= 0 || o.slowDelay <= 0 {
		t.Errorf("traffic never slows catalog: --slow-after %v --slow-delay %v", o.slowAfter, o.slowDelay)
	}
}
