package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// errChild is wrapped by the errors of a child process's lifecycle.
var errChild = errors.New("child process")

// child is a gRPC sidecar the harness started (the bulkhead daemon or the
// no-op server): its own process group, killed if the harness dies.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	addrs   map[string]string // from its address file
	done    chan struct{}     // closed once the process is reaped
	waitErr error             // read only after done is closed
}

// startChild runs bin args... with --address-file in dir and returns once
// the address file names every key in want.
func startChild(ctx context.Context, name, bin, dir string, want []string, args ...string) (*child, error) {
	addrFile := filepath.Join(dir, name+"-addr.json")
	c := &child{name: name, logPath: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	logFile, err := os.Create(c.logPath)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", errChild, name, err)
	}
	c.cmd = exec.Command(bin, append(args, "--address-file", addrFile)...)
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go c.run(started, logFile)
	if err := <-started; err != nil {
		return nil, fmt.Errorf("%w %s: start: %w", errChild, name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if c.readAddrs(addrFile, want) {
			return c, nil
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("%w %s exited during startup (%v); log in %s", errChild, name, c.waitErr, c.logPath)
		case <-ctx.Done():
			c.kill()
			return nil, fmt.Errorf("%w %s: no address file: %w; log in %s", errChild, name, ctx.Err(), c.logPath)
		case <-tick.C: // polling the address file, with a deadline
		}
	}
}

// run forks on a thread locked for the child's lifetime (the parent-death
// signal fires when the forking thread exits), then reaps the child.
func (c *child) run(started chan<- error, logFile *os.File) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer logFile.Close()
	if err := c.cmd.Start(); err != nil {
		started <- err
		close(c.done)
		return
	}
	started <- nil
	c.waitErr = c.cmd.Wait()
	close(c.done)
}

func (c *child) readAddrs(path string, want []string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var addrs map[string]string
	if json.Unmarshal(b, &addrs) != nil {
		return false
	}
	for _, k := range want {
		if addrs[k] == "" {
			return false
		}
	}
	c.addrs = addrs
	return true
}

// PID is the child's process id.
func (c *child) PID() int { return c.cmd.Process.Pid }

// stop sends SIGTERM and waits; after 10s it kills the process group.
func (c *child) stop() error {
	select {
	case <-c.done:
		return fmt.Errorf("%w %s had exited: %v", errChild, c.name, c.waitErr)
	default:
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case <-c.done:
		if c.waitErr != nil {
			return fmt.Errorf("%w %s: exit after SIGTERM: %w", errChild, c.name, c.waitErr)
		}
		return nil
	case <-timer.C:
		c.kill()
		return fmt.Errorf("%w %s did not stop within 10s of SIGTERM; killed", errChild, c.name)
	}
}

func (c *child) kill() {
	select {
	case <-c.done:
		return // reaped: the pid may be someone else's now
	default:
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	<-c.done
}
