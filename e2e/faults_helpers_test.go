//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// faultStack is a stack whose daemon and Envoy a test may kill (SIGKILL) and
// restart on the same ports. Its cleanup stops whichever processes are
// current and runs the shared invariant check first, as startStack's does.
type faultStack struct {
	*stack
	yaml   string       // the daemon's configuration below its listen and log lines
	listen string       // extra fields of the listen mapping, e.g. "grpc_max_connection_age: 2s"
	params envoy.Params // Envoy's parameters; ListenerPort is fixed once Envoy has bound it
	dir    string
	daemon *daemonProc
	gen    int // daemon generation, for distinct address files
	envLog testkit.SyncBuffer
}

// daemonProc is one bulkhead process.
type daemonProc struct {
	cmd    *exec.Cmd
	exited chan error
}

// faultSpec describes a faultStack.
type faultSpec struct {
	yaml   string              // bulkhead configuration without listen and log
	listen string              // extra listen fields
	envoy  func(*envoy.Params) // adjusts Envoy's parameters
}

// startFaultStack starts upstreams, the daemon and Envoy as startStack does,
// but keeps what it needs to restart either process.
func startFaultStack(t *testing.T, spec faultSpec) *faultStack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fs := &faultStack{
		stack:  &stack{t: t, up: map[string]*testbed.Upstream{}, limits: map[string]int{}},
		yaml:   spec.yaml,
		listen: spec.listen,
		dir:    t.TempDir(),
	}
	fs.limits = limitsOf(t, fs.configText("127.0.0.1:0"))
	fs.up = startUpstreams(t)
	fs.cfgPath = filepath.Join(fs.dir, "bulkhead.yaml")
	fs.startDaemon(ctx, "127.0.0.1:0")
	t.Cleanup(func() {
		if fs.daemon != nil {
			fs.stopDaemon()
		}
		if t.Failed() {
			t.Logf("bulkhead log:\n%s", tail(fs.daemonLog.String(), 6000))
		}
	})

	fs.params = envoy.Params{Bulkhead: endpoint(t, fs.grpcAddr),
		Routes: envoy.DemoRoutes(endpoint(t, fs.up["catalog"].Addr()), endpoint(t, fs.up["auth"].Addr()), endpoint(t, fs.up["orders"].Addr()))}
	if spec.envoy != nil {
		spec.envoy(&fs.params)
	}
	fs.startEnvoy(ctx)
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		if err := fs.envoy.Stop(sctx); err != nil {
			t.Errorf("envoy stop: %v", err)
		}
		if t.Failed() {
			t.Logf("envoy log:\n%s", tail(fs.envLog.String(), 4000))
		}
	})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(fs.base, "http://"))
	fs.params.ListenerPort, _ = strconv.Atoi(port) // a restarted Envoy binds the same port
	fs.waitAdmitting(ctx)
	t.Cleanup(fs.checkInvariant)
	return fs
}

// configText is the daemon's configuration with its gRPC listener on grpc.
func (fs *faultStack) configText(grpc string) string {
	extra := ""
	if fs.listen != "" {
		extra = ", " + fs.listen
	}
	return fmt.Sprintf("listen: {grpc: %q, http: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"%s}\nlog: {level: debug}\n%s",
		grpc, extra, fs.yaml)
}

// startDaemon starts a daemon with its gRPC listener on grpc and waits for
// its address file.
func (fs *faultStack) startDaemon(ctx context.Context, grpc string) {
	t := fs.t
	t.Helper()
	if err := os.WriteFile(fs.cfgPath, []byte(fs.configText(grpc)), 0o600); err != nil {
		t.Fatal(err)
	}
	fs.gen++
	addrPath := filepath.Join(fs.dir, fmt.Sprintf("addr-%d.json", fs.gen))
	d, addrs := startDaemonProc(t, ctx, fs.cfgPath, addrPath, &fs.daemonLog)
	fs.daemon = d
	fs.grpcAddr, fs.httpAddr, fs.adminAddr = addrs["grpc"], addrs["http"], addrs["admin"]
}

// limitsOf returns the limit of each bulkhead of a daemon configuration.
func limitsOf(t testing.TB, yaml string) map[string]int {
	t.Helper()
	cfg, err := config.Parse("e2e.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("test config: %v", err)
	}
	limits := map[string]int{}
	for name, b := range cfg.Bulkheads {
		limits[name] = b.Settings.MaxConcurrent
	}
	return limits
}

// startUpstreams starts the routes' upstreams, closed when the test ends.
func startUpstreams(t testing.TB) map[string]*testbed.Upstream {
	t.Helper()
	up := map[string]*testbed.Upstream{}
	for _, name := range routes {
		u, err := testbed.NewUpstream(name, "")
		if err != nil {
			t.Fatal(err)
		}
		up[name] = u
		t.Cleanup(func() { u.Close() })
	}
	return up
}

// startDaemonProc starts a daemon on cfgPath, its output to out, and waits
// for its address file.
func startDaemonProc(t testing.TB, ctx context.Context, cfgPath, addrPath string, out *testkit.SyncBuffer) (*daemonProc, map[string]string) {
	t.Helper()
	cmd := exec.Command(bulkheadBin, "--config", cfgPath, "--address-file", addrPath)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{cmd: cmd, exited: make(chan error, 1)}
	go func() { d.exited <- cmd.Wait() }()
	var addrs map[string]string
	poll(t, ctx, "bulkhead address file", func() bool {
		select {
		case err := <-d.exited:
			d.exited <- err
			t.Fatalf("bulkhead exited at start: %v\n%s", err, tail(out.String(), 3000))
		default:
		}
		b, err := os.ReadFile(addrPath)
		return err == nil && json.Unmarshal(b, &addrs) == nil
	})
	return d, addrs
}

// stop stops the daemon with SIGTERM and expects a clean exit.
func (d *daemonProc) stop(t testing.TB) {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.exited:
		if err != nil {
			t.Errorf("bulkhead exited with %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.exited
		t.Error("bulkhead did not stop within 10s of SIGTERM")
	}
}

// kill SIGKILLs the daemon (a crash: nothing drained or released) and waits
// until it is reaped.
func (d *daemonProc) kill(t testing.TB) {
	t.Helper()
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("bulkhead not reaped within 10s of SIGKILL")
	}
}

// stopDaemon stops the current daemon with SIGTERM and expects a clean exit.
func (fs *faultStack) stopDaemon() {
	d := fs.daemon
	fs.daemon = nil
	d.stop(fs.t)
}

// killDaemon SIGKILLs the daemon (a crash: nothing is drained or released)
// and waits until it is reaped.
func (fs *faultStack) killDaemon() {
	fs.t.Helper()
	d := fs.daemon
	fs.daemon = nil
	d.kill(fs.t)
}

// restartDaemon starts a new daemon on the gRPC port of the last one (where
// Envoy looks for it). Its HTTP and admin ports are new. It returns during
// the new daemon's recovery window (see waitAdmitting).
func (fs *faultStack) restartDaemon(ctx context.Context) {
	fs.t.Helper()
	fs.startDaemon(ctx, fs.grpcAddr)
}

// startEnvoy starts Envoy on fs.params and points the stack at it.
func (fs *faultStack) startEnvoy(ctx context.Context) {
	t := fs.t
	t.Helper()
	bootstrap, err := envoy.Render(fs.params)
	if err != nil {
		t.Fatal(err)
	}
	e, err := envoyproc.Start(ctx, envoyproc.Options{Binary: envoyBin, ConfigYAML: bootstrap, Concurrency: 2, Stderr: &fs.envLog})
	if err != nil {
		t.Fatalf("envoy: %v\n%s", err, tail(fs.envLog.String(), 4000))
	}
	fs.envoy = e
	addr, err := e.ListenerAddr(ctx, envoy.DefaultListenerName)
	if err != nil {
		t.Fatal(err)
	}
	fs.base = "http://" + addr
}

// killEnvoy SIGKILLs Envoy (a crash: no access log, no goodbye) and waits
// until it is reaped.
func (fs *faultStack) killEnvoy() {
	_ = fs.envoy.Kill()
	client.CloseIdleConnections() // they led to the dead Envoy
}

// restartEnvoy starts Envoy again with the same configuration, on the same
// listener port.
func (fs *faultStack) restartEnvoy(ctx context.Context) {
	fs.t.Helper()
	fs.startEnvoy(ctx)
}

// logCount counts the daemon's log lines (of every generation) holding s.
func (fs *faultStack) logCount(s string) int { return strings.Count(fs.daemonLog.String(), s) }

// runLoad drives spec in the background; wait returns its stats.
func runLoad(t *testing.T, ctx context.Context, spec testbed.LoadSpec) (l *testbed.Load, wait func() testbed.Stats) {
	t.Helper()
	l, err := testbed.NewLoad(spec)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan testbed.Stats, 1)
	go func() {
		st, _ := l.Run(ctx) // ErrLoadReused cannot happen: run once
		done <- st
	}()
	return l, func() testbed.Stats { return <-done }
}
