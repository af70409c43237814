package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrRedis is wrapped by the errors of a Server and of ParseInfo.
var ErrRedis = errors.New("redis-server")

// Binary is Debian's redis-server (apt-get install redis-server); Start
// falls back to redis-server on PATH.
const Binary = "/usr/bin/redis-server"

// Server is a redis-server this process started: loopback, a free port,
// no persistence, its own process group, killed if this process dies.
type Server struct {
	addr    string
	cmd     *exec.Cmd
	rdb     *redis.Client // reads INFO
	done    chan struct{} // closed once the process is reaped
	waitErr error         // read only after done is closed
}

// Start starts redis-server for name (a run's or a configuration's), its
// working folder and log in dir (redis-NAME, redis-NAME.log), and returns
// once it answers PING.
func Start(ctx context.Context, dir, name string) (*Server, error) {
	bin := Binary
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, fmt.Errorf("%w: not found (apt-get install redis-server): %w", ErrRedis, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("%w: free port: %w", ErrRedis, err)
	}
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	if err := ln.Close(); err != nil {
		return nil, fmt.Errorf("%w: free port: %w", ErrRedis, err)
	}
	work := filepath.Join(dir, "redis-"+name)
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRedis, err)
	}
	logFile, err := os.Create(filepath.Join(dir, "redis-"+name+".log"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRedis, err)
	}
	s := &Server{addr: addr, done: make(chan struct{})}
	s.cmd = exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", work, "--protected-mode", "no", "--loglevel", "warning")
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.SysProcAttr = sysProcAttr()
	started := make(chan error, 1)
	go s.run(started, logFile)
	if err := <-started; err != nil {
		return nil, fmt.Errorf("%w %s: start: %w", ErrRedis, name, err)
	}
	s.rdb = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		err := s.rdb.Ping(pctx).Err()
		pcancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("%w %s exited during startup (%v); log in %s", ErrRedis, name, s.waitErr, logFile.Name())
		case <-ctx.Done():
			return nil, errors.Join(fmt.Errorf("%w %s on %s: no PONG: %w", ErrRedis, name, addr, err), s.Stop())
		case <-time.After(20 * time.Millisecond): // polling a process we do not control, with a deadline
		}
	}
}

// run forks on a thread locked for the server's lifetime (the parent-death
// signal fires when the forking thread exits), then reaps it.
func (s *Server) run(started chan<- error, logFile *os.File) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer logFile.Close()
	if err := s.cmd.Start(); err != nil {
		started <- err
		close(s.done)
		return
	}
	started <- nil
	s.waitErr = s.cmd.Wait()
	close(s.done)
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Info reads INFO commandstats and cpu.
func (s *Server) Info(ctx context.Context) (Info, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	text, err := s.rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return Info{}, fmt.Errorf("%w INFO: %w", ErrRedis, err)
	}
	return ParseInfo(text)
}

// Stop kills the server (it holds nothing worth a graceful stop) and
// waits; it says so if the server had exited already.
func (s *Server) Stop() error {
	var err error
	if s.rdb != nil {
		err = s.rdb.Close()
	}
	select {
	case <-s.done:
		return errors.Join(err, fmt.Errorf("%w on %s had exited: %v", ErrRedis, s.addr, s.waitErr))
	default:
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	return err
}
