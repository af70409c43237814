package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

const (
	daemonReadyTimeout = 20 * time.Second
	daemonStopTimeout  = 10 * time.Second
	pollInterval       = 20 * time.Millisecond
)

// errDaemon is wrapped by the errors of the daemon's lifecycle.
var errDaemon = errors.New("bulkhead daemon")

// daemon is a running bin/bulkhead, in its own process group.
type daemon struct {
	cmd      *exec.Cmd
	logPath  string
	grpcAddr string
	httpAddr string
	// adminAddr is the admin API's (bulkheadctl's) address; "" when the
	// daemon did not report one.
	adminAddr string
	done      chan struct{} // closed once the process is reaped
	waitErr   error         // read only after done is closed
}

// startDaemon runs bin with --config and --address-file in dir, logging to
// dir/bulkhead.log, and returns once /readyz answers 200.
func startDaemon(ctx context.Context, bin, configPath, dir string) (*daemon, error) {
	addrFile := filepath.Join(dir, "bulkhead-addr.json")
	d := &daemon{logPath: filepath.Join(dir, "bulkhead.log"), done: make(chan struct{})}
	logFile, err := os.Create(d.logPath)
	if err != nil {
		return nil, fmt.Errorf("%w: log file: %w", errDaemon, err)
	}
	d.cmd = exec.Command(bin, "--config", configPath, "--address-file", addrFile)
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	d.cmd.SysProcAttr = sysProcAttr()
	started := make(chan error, 1)
	go d.run(started, logFile)
	if err := <-started; err != nil {
		return nil, fmt.Errorf("%w: start %s: %w", errDaemon, bin, err)
	}
	if err := d.waitReady(ctx, addrFile); err != nil {
		d.kill()
		<-d.done
		return nil, err
	}
	return d, nil
}

// run starts the process on a thread locked for the process's lifetime (the
// parent-death signal fires when the forking thread exits), then reaps it.
func (d *daemon) run(started chan<- error, logFile *os.File) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer logFile.Close()
	if err := d.cmd.Start(); err != nil {
		started <- err
		close(d.done)
		return
	}
	started <- nil
	d.waitErr = d.cmd.Wait()
	close(d.done)
}

// waitReady polls for the address file, then for GET /readyz == 200 and the
// end of the daemon's recovery window (bulkhead_admissions_paused 0 on
// /metrics: until then it admits no one, while it would adopt requests
// still running from before a restart).
func (d *daemon) waitReady(ctx context.Context, addrFile string) error {
	ctx, cancel := context.WithTimeout(ctx, daemonReadyTimeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if d.httpAddr == "" {
			d.readAddresses(addrFile)
		}
		if d.httpAddr != "" && ready(ctx, client, "http://"+d.httpAddr+"/readyz") && admitting(ctx, client, "http://"+d.httpAddr+"/metrics") {
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("%w exited during startup (%v); its log:\n%s", errDaemon, d.waitErr, d.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%w not ready after %v (address file written: %t): %w; its log:\n%s",
				errDaemon, daemonReadyTimeout, d.httpAddr != "", ctx.Err(), d.logTail())
		case <-tick.C:
		}
	}
}

// readAddresses reads {"grpc": ..., "http": ..., "admin": ...}; a missing
// or partly written file is retried on the next tick.
func (d *daemon) readAddresses(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var addrs struct{ GRPC, HTTP, Admin string }
	if json.Unmarshal(b, &addrs) == nil && addrs.GRPC != "" && addrs.HTTP != "" {
		d.grpcAddr, d.httpAddr, d.adminAddr = addrs.GRPC, addrs.HTTP, addrs.Admin
	}
}

// ready reports whether GET url answers 200.
func ready(ctx context.Context, client *http.Client, url string) bool {
	_, ok := get(ctx, client, url)
	return ok
}

// admitting reports whether the daemon's /metrics says admissions are not
// paused.
func admitting(ctx context.Context, client *http.Client, url string) bool {
	b, ok := get(ctx, client, url)
	return ok && bytes.Contains(b, []byte("\nbulkhead_admissions_paused 0\n"))
}

// get returns the body (up to 4 MiB) of GET url and whether it answered
// 200.
func get(ctx context.Context, client *http.Client, url string) ([]byte, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return b, err == nil && resp.StatusCode == http.StatusOK
}

// stop sends SIGTERM and waits; after daemonStopTimeout it kills the group.
func (d *daemon) stop() error {
	select {
	case <-d.done:
		return d.exitError()
	default:
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGTERM)
	timer := time.NewTimer(daemonStopTimeout)
	defer timer.Stop()
	select {
	case <-d.done:
		return d.exitError()
	case <-timer.C:
		d.kill()
		<-d.done
		return fmt.Errorf("%w did not exit within %v of SIGTERM; killed", errDaemon, daemonStopTimeout)
	}
}

// kill SIGKILLs the process group unless the process was already reaped.
func (d *daemon) kill() {
	select {
	case <-d.done:
	default:
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	}
}

func (d *daemon) exitError() error {
	if d.waitErr != nil {
		return fmt.Errorf("%w exited: %w", errDaemon, d.waitErr)
	}
	return nil
}

// logTail returns the last lines of the daemon's log.
func (d *daemon) logTail() string {
	return fileTail(d.logPath, 20)
}

// fileTail returns the last n lines of a file (at most its last 16 KiB).
func fileTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "  (no log: " + err.Error() + ")"
	}
	defer f.Close()
	const max = 16 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, max))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
