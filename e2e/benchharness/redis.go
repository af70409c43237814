package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// errRedis is wrapped by the errors of the harness's redis-server.
var errRedis = errors.New("redis-server")

// redisBinary is Debian's redis-server (apt-get install redis-server).
const redisBinary = "/usr/bin/redis-server"

// redisServer is a redis-server the harness started for one configuration
// on the Redis ledger: loopback, a free port, no persistence, its own
// process group, killed if the harness dies. rdb reads its INFO.
type redisServer struct {
	addr    string
	cmd     *exec.Cmd
	rdb     *redis.Client
	done    chan struct{} // closed once the process is reaped
	waitErr error         // read only after done is closed
}

// startRedis starts redis-server for the configuration name, its log and
// working folder in dir, and returns once it answers PING.
func startRedis(ctx context.Context, dir, name string) (*redisServer, error) {
	bin := redisBinary
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, fmt.Errorf("%w: not found (apt-get install redis-server): %w", errRedis, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("%w: free port: %w", errRedis, err)
	}
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	if err := ln.Close(); err != nil {
		return nil, fmt.Errorf("%w: free port: %w", errRedis, err)
	}
	work := filepath.Join(dir, "redis-"+name)
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %w", errRedis, err)
	}
	logFile, err := os.Create(filepath.Join(dir, "redis-"+name+".log"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRedis, err)
	}
	s := &redisServer{addr: addr, done: make(chan struct{})}
	s.cmd = exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", work, "--protected-mode", "no", "--loglevel", "warning")
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go s.run(started, logFile)
	if err := <-started; err != nil {
		return nil, fmt.Errorf("%w %s: start: %w", errRedis, name, err)
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
			return nil, fmt.Errorf("%w %s exited during startup (%v); log in %s", errRedis, name, s.waitErr, logFile.Name())
		case <-ctx.Done():
			return nil, errors.Join(fmt.Errorf("%w %s on %s: no PONG: %w", errRedis, name, addr, err), s.stop())
		case <-time.After(20 * time.Millisecond): // polling a process we do not control, with a deadline
		}
	}
}

// run forks on a thread locked for the server's lifetime (the parent-death
// signal fires when the forking thread exits), then reaps it.
func (s *redisServer) run(started chan<- error, logFile *os.File) {
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

// PID is the server's process id.
func (s *redisServer) PID() int { return s.cmd.Process.Pid }

// stop kills the server (it holds nothing worth a graceful stop) and waits.
func (s *redisServer) stop() error {
	var err error
	if s.rdb != nil {
		err = s.rdb.Close()
	}
	select {
	case <-s.done:
		return errors.Join(err, fmt.Errorf("%w on %s had exited: %v", errRedis, s.addr, s.waitErr))
	default:
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	return err
}

// redisReading is what one INFO said: every command's calls
// (commandstats, commands run inside scripts included) and the server's CPU
// time (used_cpu_sys + used_cpu_user, the whole process).
type redisReading struct {
	calls map[string]int64 // by command: "evalsha", "hset"...
	usec  map[string]int64 // by command: the time Redis spent running it, microseconds
	cpu   time.Duration
}

// read takes INFO commandstats and cpu.
func (s *redisServer) read(ctx context.Context) (redisReading, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	text, err := s.rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return redisReading{}, fmt.Errorf("%w INFO: %w", errRedis, err)
	}
	return parseInfo(text)
}

// parseInfo reads the answer of INFO commandstats cpu: lines
// "cmdstat_NAME:calls=N,usec=U,...", "used_cpu_sys:S.ssssss" and
// "used_cpu_user:S.ssssss"; section headers, blank lines and other fields
// are skipped. A command name may hold '|' (subcommands: "client|setname").
func parseInfo(text string) (redisReading, error) {
	r := redisReading{calls: map[string]int64{}, usec: map[string]int64{}}
	var sys, user bool
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		key, val, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		switch {
		case strings.HasPrefix(key, "cmdstat_"):
			calls, usec := "", ""
			for f := range strings.SplitSeq(val, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					calls = v
				}
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					usec = v
				}
			}
			n, err := strconv.ParseInt(calls, 10, 64)
			u, uerr := strconv.ParseInt(usec, 10, 64)
			if err != nil || uerr != nil || n < 0 || u < 0 {
				return redisReading{}, fmt.Errorf("%w INFO: bad %q", errRedis, line)
			}
			cmd := strings.TrimPrefix(key, "cmdstat_")
			r.calls[cmd], r.usec[cmd] = n, u
		case key == "used_cpu_sys" || key == "used_cpu_user":
			secs, err := strconv.ParseFloat(val, 64)
			if err != nil || secs < 0 {
				return redisReading{}, fmt.Errorf("%w INFO: bad %q", errRedis, line)
			}
			r.cpu += time.Duration(secs * float64(time.Second))
			sys, user = sys || key == "used_cpu_sys", user || key == "used_cpu_user"
		}
	}
	if !sys || !user {
		return redisReading{}, fmt.Errorf("%w INFO: no used_cpu_sys or used_cpu_user", errRedis)
	}
	return r, nil
}
