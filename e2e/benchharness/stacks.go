package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// env is everything the run starts: one upstream, the two sidecars, and one
// Envoy per configuration, all on 127.0.0.1 and all up for the whole run so
// that the configurations can be measured in turn, interleaved.
type env struct {
	log      *slog.Logger
	dir      string
	envoyBin string
	upstream *upstream
	noop     *child // answers a bare OK
	noopMeta *child // answers OK with the bulkhead's metadata
	daemon   *child
	stacks   []*stack
}

// stack is one configuration: its Envoy and the sidecar that Envoy calls.
type stack struct {
	spec  configSpec
	proxy *envoyproc.Proc
	addr  string // Envoy's listener, host:port
	side  *child // nil when Envoy calls no sidecar
	log   *os.File
}

// metricsURL is the daemon's /metrics, or "" for other configurations.
func (s *stack) metricsURL() string {
	if s.spec.sidecar != "daemon" {
		return ""
	}
	return "http://" + s.side.addrs["http"] + "/metrics"
}

// startEnv builds the daemon and the no-op server, then starts everything.
// On error, whatever was started is stopped.
func startEnv(ctx context.Context, log *slog.Logger, dir, envoyBin string, delay time.Duration, specs []configSpec) (_ *env, err error) {
	e := &env{log: log, dir: dir, envoyBin: envoyBin}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.stop())
		}
	}()
	bins := map[string]string{
		"bulkhead":  "github.com/bulkhead-mesh/bulkhead/cmd/bulkhead",
		"noopauthz": "github.com/bulkhead-mesh/bulkhead/e2e/benchharness/noopauthz",
	}
	for name, pkg := range bins {
		log.Info("building", "binary", name)
		// No -race: the daemon runs as it is shipped.
		out, err := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), pkg).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	if e.upstream, err = newUpstream(delay); err != nil {
		return nil, err
	}
	if e.noop, err = startChild(ctx, "noopauthz", filepath.Join(dir, "noopauthz"), dir, []string{"grpc"}); err != nil {
		return nil, err
	}
	if e.noopMeta, err = startChild(ctx, "noopauthz-metadata", filepath.Join(dir, "noopauthz"), dir, []string{"grpc"}, "--metadata"); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "bulkhead.yaml")
	if err := os.WriteFile(cfg, []byte(daemonConfig()), 0o600); err != nil {
		return nil, err
	}
	if e.daemon, err = startChild(ctx, "bulkhead", filepath.Join(dir, "bulkhead"), dir, []string{"grpc", "http"}, "--config", cfg); err != nil {
		return nil, err
	}
	up, err := endpoint(e.upstream.Addr())
	if err != nil {
		return nil, err
	}
	for _, spec := range specs {
		st := &stack{spec: spec}
		switch spec.sidecar {
		case "noop":
			st.side = e.noop
		case "noop-metadata":
			st.side = e.noopMeta
		case "daemon":
			st.side = e.daemon
		}
		var side envoy.Endpoint
		if st.side != nil {
			if side, err = endpoint(st.side.addrs["grpc"]); err != nil {
				return nil, err
			}
		}
		bootstrap, err := spec.render(up, side)
		if err != nil {
			return nil, err
		}
		if st.log, err = os.Create(filepath.Join(dir, "envoy-"+spec.Name+".log")); err != nil {
			return nil, err
		}
		st.proxy, err = envoyproc.Start(ctx, envoyproc.Options{Binary: envoyBin, ConfigYAML: bootstrap,
			Concurrency: 2, Stderr: st.log})
		if err != nil {
			st.log.Close()
			return nil, fmt.Errorf("envoy %s: %w", spec.Name, err)
		}
		e.stacks = append(e.stacks, st)
		if st.addr, err = st.proxy.ListenerAddr(ctx, "front"); err != nil {
			return nil, fmt.Errorf("envoy %s: %w", spec.Name, err)
		}
		if err := smoke(ctx, st); err != nil {
			return nil, err
		}
		log.Info("configuration up", "config", spec.Name, "envoy", st.addr)
	}
	return e, nil
}

// smoke sends a few requests through st and wants 200s; for the bulkhead it
// also wants every permit back.
func smoke(ctx context.Context, st *stack) error {
	h := newConn(st.addr, "/")
	defer h.close()
	for range 5 {
		status, err := h.do(ctx)
		if err != nil {
			return fmt.Errorf("smoke test of %s: %w", st.spec.Name, err)
		}
		if status != 200 {
			return fmt.Errorf("smoke test of %s: status %d", st.spec.Name, status)
		}
	}
	url := st.metricsURL()
	if url == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		m, err := testbed.Scrape(ctx, url)
		if err != nil {
			return err
		}
		active, _ := m.Value("bulkhead_active_calls", map[string]string{"dependency": routeName})
		admitted := m.Sum("bulkhead_admitted_total", map[string]string{"dependency": routeName})
		if admitted >= 5 && active == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("smoke test of %s: %v admitted, %v permits still held: %w", st.spec.Name, admitted, active, ctx.Err())
		case <-time.After(20 * time.Millisecond): // polling, with a deadline
		}
	}
}

// stop stops every Envoy, then the sidecars and the upstream.
func (e *env) stop() error {
	var errs []error
	for _, st := range e.stacks {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := st.proxy.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("envoy %s: %w", st.spec.Name, err))
		}
		cancel()
		st.log.Close() // after Envoy exited: nothing writes to it any more
	}
	for _, c := range []*child{e.daemon, e.noop, e.noopMeta} {
		if c != nil {
			if err := c.stop(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if e.upstream != nil {
		if err := e.upstream.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func endpoint(hostport string) (envoy.Endpoint, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return envoy.Endpoint{}, err
	}
	p, err := strconv.Atoi(port)
	return envoy.Endpoint{Host: host, Port: p}, err
}

// envoyVersion is the first line of `envoy --version` that names the version.
func envoyVersion(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for line := range strings.Lines(string(out)) {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return "unknown"
}
