package envoyproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Errors returned by Start and the Proc methods.
var (
	// ErrNoConfig means Options.ConfigYAML was empty.
	ErrNoConfig = errors.New("envoy config is empty")
	// ErrNotReady means Envoy did not become ready; the message carries the
	// tail of its stderr when there is one.
	ErrNotReady = errors.New("envoy did not become ready")
	// ErrExited means the process has already exited.
	ErrExited = errors.New("envoy exited")
	// ErrKilled means Stop had to SIGKILL Envoy because it did not exit in time.
	ErrKilled = errors.New("envoy killed after stop timeout")
	// ErrAdmin means the admin interface answered badly or not at all.
	ErrAdmin = errors.New("envoy admin")
)

// Defaults for zero-valued Options fields.
const (
	DefaultConcurrency  = 2
	DefaultLogLevel     = "warning"
	DefaultReadyTimeout = 30 * time.Second
	// DefaultStopTimeout bounds Stop when its ctx has no earlier deadline.
	DefaultStopTimeout = 10 * time.Second

	pollInterval = 20 * time.Millisecond
	stderrTail   = 8 << 10
	// waitDelay bounds how long Wait keeps copying output after the process
	// exits (the group is killed, so nothing should hold the pipes).
	waitDelay = 5 * time.Second
)

// Options configure Start. Only ConfigYAML is required.
type Options struct {
	// Binary is the envoy executable; "" = FindBinary().
	Binary string
	// ConfigYAML is the bootstrap (e.g. from envoy.Render). Its admin
	// address should be on 127.0.0.1; port 0 is fine.
	ConfigYAML []byte
	// Concurrency is the number of worker threads; 0 = DefaultConcurrency.
	Concurrency int
	// BaseID is Envoy's --base-id; 0 = a random one, so concurrent
	// instances never share one.
	BaseID int
	// LogLevel is Envoy's -l; "" = DefaultLogLevel.
	LogLevel string
	// LogPath, if set, is Envoy's --log-path; else Envoy logs to stderr.
	LogPath string
	// Stdout and Stderr receive Envoy's output; nil = discarded. The last
	// few KiB of stderr are kept for error messages either way.
	Stdout, Stderr io.Writer
	// ReadyTimeout bounds the wait for readiness; 0 = DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// ExtraArgs are appended to Envoy's command line.
	ExtraArgs []string
}

// Proc is a running Envoy process started by Start.
type Proc struct {
	cmd    *exec.Cmd
	dir    string // temp dir with the config, removed after exit
	admin  string // admin host:port
	client *http.Client
	tail   *tailBuffer

	killed  atomic.Bool   // set before we SIGKILL the group
	done    chan struct{} // closed after the process exited and was reaped
	waitErr error         // cmd.Wait's result; read only after done is closed
}

// Start runs Envoy with opts and returns once its admin interface answers
// GET /ready with 200. If ctx ends, the timeout passes or Envoy exits first,
// the process group is killed and the error wraps ErrNotReady (or ctx's
// error). The caller must Stop or Kill a returned Proc.
func Start(ctx context.Context, opts Options) (*Proc, error) {
	if len(opts.ConfigYAML) == 0 {
		return nil, ErrNoConfig
	}
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = FindBinary(); err != nil {
			return nil, err
		}
	}
	opts = opts.withDefaults()

	dir, err := os.MkdirTemp("", "envoyproc-")
	if err != nil {
		return nil, fmt.Errorf("envoy work dir: %w", err)
	}
	cfgPath := filepath.Join(dir, "envoy.yaml")
	adminPath := filepath.Join(dir, "admin-address")
	if err := os.WriteFile(cfgPath, opts.ConfigYAML, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("write envoy config: %w", err)
	}

	args := []string{
		"--disable-hot-restart",
		"--base-id", strconv.Itoa(opts.BaseID),
		"--concurrency", strconv.Itoa(opts.Concurrency),
		"--admin-address-path", adminPath,
		"-c", cfgPath,
		"-l", opts.LogLevel,
	}
	if opts.LogPath != "" {
		args = append(args, "--log-path", opts.LogPath)
	}
	args = append(args, opts.ExtraArgs...)

	p := &Proc{
		dir:    dir,
		tail:   &tailBuffer{max: stderrTail},
		done:   make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.SysProcAttr = sysProcAttr()
	p.cmd.Stdout = opts.Stdout
	p.cmd.Stderr = p.tail
	if opts.Stderr != nil {
		p.cmd.Stderr = io.MultiWriter(p.tail, opts.Stderr)
	}
	p.cmd.WaitDelay = waitDelay
	started := make(chan error, 1)
	go p.run(started)
	if err := <-started; err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}

	if err := p.waitReady(ctx, adminPath, opts.ReadyTimeout); err != nil {
		p.killGroup()
		<-p.done
		return nil, err
	}
	return p, nil
}

func (o Options) withDefaults() Options {
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.BaseID == 0 {
		// Hot restart is disabled, but distinct ids keep concurrent
		// instances apart whatever Envoy uses them for.
		o.BaseID = 1 + rand.IntN(1<<24)
	}
	if o.LogLevel == "" {
		o.LogLevel = DefaultLogLevel
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	return o
}

// run starts the process, reports the start error on started, then reaps
// the process, removes the work dir and closes done.
//
// The parent-death signal fires when the thread that forked Envoy exits, and
// Go may end a thread at any time once no goroutine is locked to it; so the
// fork happens on a thread locked by this goroutine, which lives exactly as
// long as Envoy.
func (p *Proc) run(started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := p.cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	err := p.cmd.Wait()
	os.RemoveAll(p.dir)
	p.waitErr = err
	close(p.done)
}

// waitReady polls for the admin address file, then for GET /ready == 200.
func (p *Proc) waitReady(ctx context.Context, adminPath string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if p.admin == "" {
			if b, err := os.ReadFile(adminPath); err == nil && len(b) > 0 {
				p.admin = strings.TrimSpace(string(b))
			}
		}
		if p.admin != "" && p.ready(ctx) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%w: %w (%v)%s", ErrNotReady, ErrExited, p.waitErr, p.tail.suffix())
		case <-ctx.Done():
			return fmt.Errorf("%w (timeout %v): %w%s", ErrNotReady, timeout, ctx.Err(), p.tail.suffix())
		case <-tick.C:
		}
	}
}

// ready reports whether GET /ready answers 200.
func (p *Proc) ready(ctx context.Context) bool {
	resp, err := p.get(ctx, "/ready")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode == http.StatusOK
}

// AdminAddr returns the admin interface's host:port.
func (p *Proc) AdminAddr() string { return p.admin }

// PID returns the Envoy process id (also its process group id).
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait blocks until the process exits and returns its exit error (nil for
// status 0; an *exec.ExitError after a signal or a failure).
func (p *Proc) Wait() error {
	<-p.done
	return p.waitErr
}

// Stop asks Envoy to exit (POST /quitquitquit) and waits for it. If it has
// not exited when ctx ends (or after DefaultStopTimeout), the process group
// is killed and the error wraps ErrKilled. Stop returns nil if the process
// exits with status 0 or had already been killed by Kill; it is safe to call
// more than once.
func (p *Proc) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, DefaultStopTimeout)
	defer cancel()
	select {
	case <-p.done:
		return p.exitResult()
	default:
	}
	if resp, err := p.post(ctx, "/quitquitquit"); err == nil {
		resp.Body.Close()
	} else {
		// The admin interface is gone or stuck: fall back to SIGTERM.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	}
	select {
	case <-p.done:
		return p.exitResult()
	case <-ctx.Done():
		p.killGroup()
		<-p.done
		return fmt.Errorf("%w: %w", ErrKilled, ctx.Err())
	}
}

// Kill sends SIGKILL to Envoy's process group (a crash, for fault tests) and
// waits until the process is reaped. It is safe to call more than once.
func (p *Proc) Kill() error {
	p.killGroup()
	<-p.done
	return nil
}

func (p *Proc) killGroup() {
	select {
	case <-p.done:
		return // reaped: the pid may belong to someone else now
	default:
	}
	p.killed.Store(true)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// exitResult is Stop's view of an exited process.
func (p *Proc) exitResult() error {
	if p.waitErr == nil || p.killed.Load() {
		return nil
	}
	return fmt.Errorf("%w: %w%s", ErrExited, p.waitErr, p.tail.suffix())
}
