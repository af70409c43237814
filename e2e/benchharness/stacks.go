package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
	"golang.org/x/sync/errgroup"
)

// env is everything the run starts: one upstream, the sidecars, and one
// Envoy per configuration, all on 127.0.0.1 and all up for the whole run so
// that the configurations can be measured in turn, interleaved.
type env struct {
	log      *slog.Logger
	dir      string
	envoyBin string
	baseline string // the -baseline daemon ("" for none)
	conns    int    // the closed loop's connections (sharesLimit)
	upstream *upstream
	// sidecars by configSpec.sidecar; only those some configuration calls.
	sidecars map[string]*child
	// replicas are the further daemon replicas of a sidecar on the Redis
	// ledger (configSpec.redisReplicas > 1), redis its redis-server, floors
	// that server's own idle CPU (measured before any daemon connected);
	// all by configSpec.sidecar.
	replicas map[string][]*child
	redis    map[string]*redisproc.Server
	floors   map[string]redisproc.Floor
	stacks   []*stack // the configurations of the closed and open loops
	// heartbeat are the heartbeat phase's pair (on, off), or none.
	heartbeat []*stack
}

// stack is one configuration: its Envoy and the sidecar that Envoy calls.
type stack struct {
	spec  configSpec
	proxy *envoyproc.Proc
	addr  string // Envoy's listener, host:port
	side  *child // nil when Envoy calls no sidecar
	// more are the further daemon replicas behind the same Envoy, redis
	// the ledger's server (nil with the in-memory ledger) and floor its
	// idle floor (nil with the in-memory ledger).
	more  []*child
	redis *redisproc.Server
	floor *redisproc.Floor
	log   *os.File
}

// metricsURL is the daemon's /metrics (replica 0's), or "" for other
// configurations.
func (s *stack) metricsURL() string {
	if !s.spec.daemon() {
		return ""
	}
	return "http://" + s.side.addrs["http"] + "/metrics"
}

// metricsURLs are every daemon replica's /metrics, replica 0 first; none
// for other configurations.
func (s *stack) metricsURLs() []string {
	if !s.spec.daemon() {
		return nil
	}
	var out []string
	for _, c := range slices.Concat([]*child{s.side}, s.more) {
		out = append(out, "http://"+c.addrs["http"]+"/metrics")
	}
	return out
}

// startEnv builds the daemon and the no-op server, then starts everything:
// specs are the configurations of the closed and open loops, heartbeat
// those of the heartbeat phase. On error, whatever was started is stopped.
func startEnv(ctx context.Context, log *slog.Logger, dir, envoyBin, baseline string, delay time.Duration, conns int,
	specs, heartbeat []configSpec) (_ *env, err error) {
	e := &env{log: log, dir: dir, envoyBin: envoyBin, baseline: baseline, conns: conns, sidecars: map[string]*child{},
		replicas: map[string][]*child{}, redis: map[string]*redisproc.Server{}, floors: map[string]redisproc.Floor{}}
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
	// Every redis-server first, then their idle floors, together, before
	// any daemon connects.
	for _, spec := range slices.Concat(specs, heartbeat) {
		if spec.redisReplicas == 0 || e.redis[spec.sidecar] != nil {
			continue
		}
		rs, err := redisproc.Start(ctx, dir, spec.Name)
		if err != nil {
			return nil, err
		}
		e.redis[spec.sidecar] = rs
		log.Info("redis-server up", "config", spec.Name, "addr", rs.Addr())
	}
	if err := e.measureFloors(ctx); err != nil {
		return nil, err
	}
	for _, spec := range slices.Concat(specs, heartbeat) {
		if spec.sidecar == "" || e.sidecars[spec.sidecar] != nil {
			continue
		}
		redisAddr := ""
		if rs := e.redis[spec.sidecar]; rs != nil {
			redisAddr = rs.Addr()
		}
		if e.sidecars[spec.sidecar], err = e.startSidecar(ctx, spec, 0, redisAddr); err != nil {
			return nil, err
		}
		for i := 1; i < spec.redisReplicas; i++ {
			c, err := e.startSidecar(ctx, spec, i, redisAddr)
			if err != nil {
				return nil, err
			}
			e.replicas[spec.sidecar] = append(e.replicas[spec.sidecar], c)
		}
	}
	up, err := endpoint(e.upstream.Addr())
	if err != nil {
		return nil, err
	}
	for i, spec := range slices.Concat(specs, heartbeat) {
		st, err := e.startStack(ctx, spec, up)
		if st != nil && i < len(specs) {
			e.stacks = append(e.stacks, st)
		} else if st != nil {
			e.heartbeat = append(e.heartbeat, st)
		}
		if err != nil {
			return nil, err
		}
		log.Info("configuration up", "config", spec.Name, "envoy", st.addr)
	}
	return e, nil
}

// measureFloors measures every redis-server's idle floor
// (redisproc.FloorWindow), all in the same window, into e.floors.
func (e *env) measureFloors(ctx context.Context) error {
	if len(e.redis) == 0 {
		return nil
	}
	e.log.Info("redis-servers idle, before any daemon connects", "window", redisproc.FloorWindow)
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	for sidecar, rs := range e.redis {
		g.Go(func() error {
			f, err := rs.IdleFloor(gctx, redisproc.FloorWindow)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			e.floors[sidecar] = f
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for sidecar, f := range e.floors {
		e.log.Info("redis-server idle floor", "sidecar", sidecar, "cpu_ms_per_s", round3(f.MsPerSecond()))
	}
	return nil
}

// startSidecar starts the gRPC server spec calls: a no-op server, or
// replica i of a daemon with its configuration (daemonConfig), on the
// Redis at redisAddr unless it is "".
func (e *env) startSidecar(ctx context.Context, spec configSpec, i int, redisAddr string) (*child, error) {
	switch spec.sidecar {
	case sidecarNoop:
		return startChild(ctx, "noopauthz", filepath.Join(e.dir, "noopauthz"), e.dir, []string{"grpc"})
	case sidecarNoopMetadata:
		return startChild(ctx, "noopauthz-metadata", filepath.Join(e.dir, "noopauthz"), e.dir, []string{"grpc"}, "--metadata")
	}
	if !spec.daemon() {
		return nil, fmt.Errorf("configuration %s: unknown sidecar %q", spec.Name, spec.sidecar)
	}
	name := strings.Replace(spec.sidecar, sidecarDaemon, "bulkhead", 1)
	if i > 0 {
		name += fmt.Sprintf("-replica-%d", i)
	}
	cfg := filepath.Join(e.dir, name+".yaml")
	if err := os.WriteFile(cfg, []byte(daemonConfig(spec.sidecar, redisAddr, e.conns)), 0o600); err != nil {
		return nil, err
	}
	bin := filepath.Join(e.dir, "bulkhead")
	if spec.baseline {
		bin = e.baseline
	}
	return startChild(ctx, name, bin, e.dir, []string{"grpc", "http"}, "--config", cfg)
}

// startStack starts spec's Envoy in front of upstream and smoke-tests it.
// The stack is returned once its Envoy runs, with an error or not, so that
// the caller stops it.
func (e *env) startStack(ctx context.Context, spec configSpec, up envoy.Endpoint) (*stack, error) {
	st := &stack{spec: spec, side: e.sidecars[spec.sidecar], more: e.replicas[spec.sidecar], redis: e.redis[spec.sidecar]}
	if f, ok := e.floors[spec.sidecar]; ok {
		st.floor = &f
	}
	var side envoy.Endpoint
	var more []envoy.Endpoint
	if st.side != nil {
		var err error
		if side, err = endpoint(st.side.addrs["grpc"]); err != nil {
			return nil, err
		}
	}
	for _, c := range st.more {
		ep, err := endpoint(c.addrs["grpc"])
		if err != nil {
			return nil, err
		}
		more = append(more, ep)
	}
	bootstrap, err := spec.render(up, side, more...)
	if err != nil {
		return nil, err
	}
	if st.log, err = os.Create(filepath.Join(e.dir, "envoy-"+spec.Name+".log")); err != nil {
		return nil, err
	}
	st.proxy, err = envoyproc.Start(ctx, envoyproc.Options{Binary: e.envoyBin, ConfigYAML: bootstrap,
		Concurrency: 2, Stderr: st.log})
	if err != nil {
		st.log.Close()
		return nil, fmt.Errorf("envoy %s: %w", spec.Name, err)
	}
	if st.addr, err = st.proxy.ListenerAddr(ctx, "front"); err != nil {
		return st, fmt.Errorf("envoy %s: %w", spec.Name, err)
	}
	return st, smoke(ctx, st)
}

// smoke sends a few requests through st and wants 200s; for the bulkhead it
// also wants every permit back (admissions summed over its replicas; the
// permits in use from replica 0, which reports the global count on the
// Redis ledger).
func smoke(ctx context.Context, st *stack) error {
	h := newConn(st.addr, "/")
	defer h.close()
	if err := admitting(ctx, st, h); err != nil {
		return err
	}
	if st.spec.shares {
		// Requests on the share route reach the daemon neither as Checks
		// nor as access-log entries: wait for the share, then want 200s.
		if err := shareHandedOut(ctx, st); err != nil {
			return err
		}
		for range 5 {
			status, err := h.do(ctx)
			if err != nil {
				return fmt.Errorf("smoke test of %s under its share: %w", st.spec.Name, err)
			}
			if status != 200 {
				return fmt.Errorf("smoke test of %s under its share: status %d", st.spec.Name, status)
			}
		}
		return nil
	}
	for range 5 {
		status, err := h.do(ctx)
		if err != nil {
			return fmt.Errorf("smoke test of %s: %w", st.spec.Name, err)
		}
		if status != 200 {
			return fmt.Errorf("smoke test of %s: status %d", st.spec.Name, status)
		}
	}
	urls := st.metricsURLs()
	if len(urls) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		var active, admitted float64
		for i, url := range urls {
			m, err := testbed.Scrape(ctx, url)
			if err != nil {
				return err
			}
			if i == 0 {
				active, _ = m.Value("bulkhead_active_calls", map[string]string{"dependency": routeName})
			}
			admitted += m.Sum("bulkhead_admitted_total", map[string]string{"dependency": routeName})
		}
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

// admitting waits until st answers a 200: a daemon with heartbeats on
// pauses admissions for its recovery window after it starts (Envoy answers
// 503 meanwhile), which an Envoy started at once after it can fall in.
func admitting(ctx context.Context, st *stack, h *conn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		status, err := h.do(ctx)
		if err == nil && status == 200 {
			return nil
		}
		if err == nil && status != 503 {
			return fmt.Errorf("smoke test of %s: status %d", st.spec.Name, status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("smoke test of %s: no 200 (last: status %d): %w", st.spec.Name, status, errors.Join(err, ctx.Err()))
		case <-time.After(100 * time.Millisecond): // polling, with a deadline
		}
	}
}

// stop stops every Envoy, then the sidecars and the upstream.
func (e *env) stop() error {
	var errs []error
	for _, st := range slices.Concat(e.stacks, e.heartbeat) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := st.proxy.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("envoy %s: %w", st.spec.Name, err))
		}
		cancel()
		st.log.Close() // after Envoy exited: nothing writes to it any more
	}
	for _, c := range slices.Concat(slices.Collect(maps.Values(e.sidecars)), slices.Concat(slices.Collect(maps.Values(e.replicas))...)) {
		if err := c.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	// After the daemons, which say goodbye to their ledger as they stop.
	for _, r := range e.redis {
		if err := r.Stop(); err != nil {
			errs = append(errs, err)
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
