package meshsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// ErrDaemon is wrapped by the errors of the daemon's lifecycle.
var ErrDaemon = errors.New("daemon")

// BuildDaemon builds cmd/bulkhead (as shipped: no -race) into dir.
func BuildDaemon(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "bulkhead")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/bulkhead-mesh/bulkhead/cmd/bulkhead").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w: go build: %w\n%s", ErrDaemon, err, out)
	}
	return bin, nil
}

// FreePort returns a loopback address with a port free now: the daemon's
// gRPC address, kept across its restarts.
func FreePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// DaemonConfig is the daemon's configuration file for routes, listening on
// grpcAddr: each route's bulkhead with its Limit (a queue of twice the
// limit and a 200 ms max_wait), or, with Limit 0, a limit and a queue no
// load reaches (Checks then wait only during a recovery window, up to
// their deadline); with tenants, every bulkhead without a limit gets
// tenant compartments. ledger is the ledger section (Ledger.yaml; "" for
// the in-memory ledger).
func DaemonConfig(grpcAddr string, routes []Route, tenants bool, ledger string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: {grpc: %q, http: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\n", grpcAddr)
	b.WriteString("log: {level: warn}\n")
	b.WriteString(ledger)
	if tenants {
		fmt.Fprintf(&b, "authz: {tenant_header: %s}\n", captureTenant)
	}
	b.WriteString("bulkheads:\n")
	for _, r := range routes {
		share := ""
		if r.Shares != "" {
			share = fmt.Sprintf(", shares: {mode: %s}", r.Shares)
		}
		switch {
		case r.Limit > 0:
			fmt.Fprintf(&b, "  %s: {max_concurrent: %d, max_queue: %d, max_wait: 200ms%s}\n", r.Bulkhead, r.Limit, 2*r.Limit, share)
		case r.Shares != "":
			// Every share is backed by permits held in the limiter: a limit of
			// 100,000 would hold hundreds of thousands for idle Envoys.
			fmt.Fprintf(&b, "  %s: {max_concurrent: %d, max_queue: %d%s}\n", r.Bulkhead, SharesUnlimited, SharesUnlimited, share)
		case tenants:
			fmt.Fprintf(&b, "  %s: {max_concurrent: 100000, max_queue: 100000, tenant: {max_concurrent: 1000}}\n", r.Bulkhead)
		default:
			fmt.Fprintf(&b, "  %s: {max_concurrent: 100000, max_queue: 100000}\n", r.Bulkhead)
		}
	}
	return b.String()
}

// SharesUnlimited is the limit of a bulkhead in shares mode that the
// load is not meant to reach: each of N Envoys gets a share of about
// SharesUnlimited/(2N) above its demand.
const SharesUnlimited = 1000

// EnvDaemonGODEBUG names the environment variable that, if set, is the daemon's GODEBUG (gctrace=1 writes
// each GC's live heap to the daemon's log, bulkhead.log in the run's
// directory).
const EnvDaemonGODEBUG = "MESHSIM_DAEMON_GODEBUG"

// Daemon is a bulkhead daemon this process started: its own process group,
// killed if this process dies.
type Daemon struct {
	bin, dir, cfg string
	cpus          string // the CPUs it runs on ("": any)
	cmd           *exec.Cmd
	done          chan struct{} // closed once reaped
	waitErr       error
	Started       time.Time // when the process was started
	GRPC, HTTP    string    // addresses
}

// DaemonOption configures StartDaemon.
type DaemonOption func(*Daemon)

// OnCPUs runs the daemon on cpus, a CPU list as taskset -c takes it ("":
// any CPU): under taskset, which execs it, so every thread of it (and of
// the daemon it starts again on Restart) runs there.
func OnCPUs(cpus string) DaemonOption { return func(d *Daemon) { d.cpus = cpus } }

// StartDaemon writes cfg into dir and runs bin with it; it returns once
// the daemon wrote its addresses.
func StartDaemon(ctx context.Context, bin, dir, cfg string, opts ...DaemonOption) (*Daemon, error) {
	d := &Daemon{bin: bin, dir: dir, cfg: filepath.Join(dir, "bulkhead.yaml")}
	for _, o := range opts {
		o(d)
	}
	if err := os.WriteFile(d.cfg, []byte(cfg), 0o600); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDaemon, err)
	}
	return d, d.start(ctx)
}

func (d *Daemon) start(ctx context.Context) error {
	addrFile := filepath.Join(d.dir, "addr.json")
	_ = os.Remove(addrFile)
	logf, err := os.OpenFile(filepath.Join(d.dir, "bulkhead.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDaemon, err)
	}
	d.cmd = pinned(d.cpus, d.bin, "--config", d.cfg, "--address-file", addrFile)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if v := os.Getenv(EnvDaemonGODEBUG); v != "" {
		d.cmd.Env = append(os.Environ(), "GODEBUG="+v)
	}
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	d.done = make(chan struct{})
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the forking thread exits.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer logf.Close()
		if err := d.cmd.Start(); err != nil {
			started <- err
			close(d.done)
			return
		}
		started <- nil
		d.waitErr = d.cmd.Wait()
		close(d.done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("%w: start: %w", ErrDaemon, err)
	}
	d.Started = time.Now()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(addrFile); err == nil {
			var addrs map[string]string
			if json.Unmarshal(b, &addrs) == nil && addrs["grpc"] != "" && addrs["http"] != "" {
				d.GRPC, d.HTTP = addrs["grpc"], addrs["http"]
				return nil
			}
		}
		select {
		case <-d.done:
			return fmt.Errorf("%w exited at its start (%v); log in %s", ErrDaemon, d.waitErr, d.dir)
		case <-ctx.Done():
			d.Kill()
			return fmt.Errorf("%w: no address file: %w", ErrDaemon, ctx.Err())
		case <-tick.C: // polling the address file, with a deadline
		}
	}
}

// Restart kills the daemon (SIGKILL: a crash, or a pod's end) and starts
// it again on the same addresses.
func (d *Daemon) Restart(ctx context.Context) error {
	d.Kill()
	return d.start(ctx)
}

// PID is the running daemon's process id (taskset's, which became the
// daemon, when pinned).
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

// Affinity is where the daemon's threads may run, from /proc.
func (d *Daemon) Affinity() (Affinity, error) { return threadCPUs(d.PID()) }

// Kill kills the daemon's process group and reaps it.
func (d *Daemon) Kill() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	<-d.done
}

// Stop sends SIGTERM and waits; after 10 s it kills.
func (d *Daemon) Stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		d.Kill()
	}
}

// Metrics scrapes the daemon's /metrics.
func (d *Daemon) Metrics(ctx context.Context) (*testbed.Metrics, error) {
	return testbed.Scrape(ctx, "http://"+d.HTTP+"/metrics")
}

// Usage is what the daemon process uses, from /proc.
type Usage struct {
	CPU time.Duration // user + system, since its start
	RSS int64         // resident, bytes
}

// Usage reads the daemon's CPU time and resident memory from /proc.
func (d *Daemon) Usage() (Usage, error) { return procUsage(d.PID()) }

// procUsage reads utime+stime (fields 14 and 15 of /proc/PID/stat, in
// USER_HZ = 100 ticks a second) and VmRSS of process pid.
func procUsage(pid int) (Usage, error) {
	var u Usage
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, fmt.Errorf("%w: %w", ErrDaemon, err)
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return u, fmt.Errorf("%w: /proc/%d/stat: %q", ErrDaemon, pid, b)
	}
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return u, fmt.Errorf("%w: %w", ErrDaemon, err)
		}
		u.CPU += time.Duration(v) * 10 * time.Millisecond
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, fmt.Errorf("%w: %w", ErrDaemon, err)
	}
	for line := range strings.Lines(string(st)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return u, fmt.Errorf("%w: VmRSS %q: %w", ErrDaemon, rest, err)
			}
			u.RSS = kb << 10
		}
	}
	return u, nil
}

// histogram is a Prometheus histogram's cumulative buckets, summed over
// every label set.
type histogram map[float64]float64

func histogramOf(m *testbed.Metrics, name string) histogram {
	h := histogram{}
	for _, s := range m.Samples(name + "_bucket") {
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if s.Labels["le"] == "+Inf" {
			le, err = math.Inf(1), nil
		}
		if err == nil {
			h[le] += s.Value
		}
	}
	return h
}

// quantileSince is the q-quantile of the observations between before and
// h, interpolated linearly within a bucket (like histogram_quantile), and
// their count.
func (h histogram) quantileSince(before histogram, q float64) (float64, float64) {
	les := make([]float64, 0, len(h))
	for le := range h {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 {
		return 0, 0
	}
	total := h[les[len(les)-1]] - before[les[len(les)-1]]
	if total <= 0 {
		return 0, 0
	}
	rank, prevLE, prevN := q*total, 0.0, 0.0
	for _, le := range les {
		n := h[le] - before[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				return prevLE, total
			}
			return prevLE + (le-prevLE)*(rank-prevN)/max(n-prevN, 1e-9), total
		}
		prevLE, prevN = le, n
	}
	return prevLE, total
}

// DumpGoroutines ends the daemon with SIGQUIT, which makes Go's runtime
// write every goroutine's stack to its log, and returns how many
// goroutines each creator ("created by" frame) had, most first.
func (d *Daemon) DumpGoroutines() ([]Count, error) {
	logPath := filepath.Join(d.dir, "bulkhead.log")
	st, err := os.Stat(logPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDaemon, err)
	}
	_ = syscall.Kill(d.cmd.Process.Pid, syscall.SIGQUIT)
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		d.Kill()
	}
	f, err := os.Open(logPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDaemon, err)
	}
	defer f.Close()
	if _, err := f.Seek(st.Size(), 0); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDaemon, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<30))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDaemon, err)
	}
	return goroutineCreators(string(b)), nil
}

// Count is a goroutine creator and its goroutines.
type Count struct {
	What string `json:"what"`
	N    int    `json:"n"`
}

// goroutineCreators counts the goroutines of a Go traceback by the
// function that created them (and, for those created by the same, the
// function they wait in).
func goroutineCreators(dump string) []Count {
	counts := map[string]int{}
	for _, block := range strings.Split(dump, "\n\ngoroutine ") {
		lines := strings.Split(block, "\n")
		if len(lines) < 2 || !strings.Contains(lines[0], "]:") {
			continue
		}
		top := strings.TrimSpace(lines[1])
		if i := strings.LastIndexByte(top, '('); i > 0 {
			top = top[:i]
		}
		creator := "(main)"
		for _, l := range lines {
			if c, ok := strings.CutPrefix(l, "created by "); ok {
				if i := strings.Index(c, " in goroutine"); i > 0 {
					c = c[:i]
				}
				creator = c
			}
		}
		counts[creator+" / "+top]++
	}
	out := make([]Count, 0, len(counts))
	for k, v := range counts {
		out = append(out, Count{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].N > out[j].N || out[i].N == out[j].N && out[i].What < out[j].What })
	return out
}
