package testkit

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Redis is a real redis-server (Debian's package) on a loopback port, with
// no persistence: a restart loses every key, as a failover can.
type Redis struct {
	Addr string
	t    testing.TB
	dir  string
	args []string
	cmd  *exec.Cmd
}

// StartRedis starts redis-server on 127.0.0.1 and stops it when the test
// ends; extra are more `--name value` arguments. Without redis-server on
// PATH the test is skipped, or fails when BULKHEAD_REQUIRE_REDIS is set.
func StartRedis(t testing.TB, extra ...string) *Redis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("BULKHEAD_REQUIRE_REDIS") != "" {
			t.Fatalf("redis-server not found (apt-get install redis-server): %v", err)
		}
		t.Skip("redis-server not found; BULKHEAD_REQUIRE_REDIS=1 makes this a failure")
	}
	r := &Redis{t: t, dir: t.TempDir()}
	r.Addr = freeAddr(t)
	_, port, _ := net.SplitHostPort(r.Addr)
	r.args = append([]string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", r.dir, "--protected-mode", "no", "--loglevel", "warning"}, extra...)
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// Start starts the server (again, after Kill: empty, on the same port) and
// waits until it answers.
func (r *Redis) Start() {
	r.t.Helper()
	cmd := exec.Command("redis-server", r.args...)
	cmd.SysProcAttr = childAttr()
	cmd.Stdout = &logWriter{t: r.t, prefix: "redis " + r.Addr + ": "}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	r.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := Ping(r.Addr); err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s did not answer within 10s", r.Addr)
		}
		time.Sleep(10 * time.Millisecond) // polling a process we do not control
	}
}

// Kill stops the server with SIGKILL and waits for it.
func (r *Redis) Kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// Stop is SIGSTOP: the server holds its connections and answers nothing.
func (r *Redis) Stop() { _ = r.cmd.Process.Signal(stopSignal) }

// Continue is SIGCONT after Stop.
func (r *Redis) Continue() { _ = r.cmd.Process.Signal(contSignal) }

// Dir is the server's working directory.
func (r *Redis) Dir() string { return filepath.Clean(r.dir) }

// Ping sends PING to a Redis server at addr and checks for +PONG.
func Ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis at %s answered %q", addr, strings.TrimSpace(line))
	}
	return nil
}

// freeAddr returns a loopback address with a port that was free just now.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// logWriter sends a child process's output to the test log.
type logWriter struct {
	t      testing.TB
	prefix string
}

func (w *logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + line)
	}
	return len(p), nil
}

// Sentinel is a real redis-sentinel watching one master on loopback.
type Sentinel struct {
	Addr string
	cmd  *exec.Cmd
}

// StartSentinel starts a Sentinel (quorum 1) watching the master at
// masterAddr under name, quick to act: the master is down after downAfter
// without an answer. It is stopped when the test ends.
func StartSentinel(t testing.TB, name, masterAddr string, downAfter time.Duration) *Sentinel {
	t.Helper()
	if _, err := exec.LookPath("redis-sentinel"); err != nil {
		if os.Getenv("BULKHEAD_REQUIRE_REDIS") != "" {
			t.Fatalf("redis-sentinel not found (apt-get install redis-sentinel): %v", err)
		}
		t.Skip("redis-sentinel not found; BULKHEAD_REQUIRE_REDIS=1 makes this a failure")
	}
	s := &Sentinel{Addr: freeAddr(t)}
	host, mport, _ := net.SplitHostPort(masterAddr)
	_, port, _ := net.SplitHostPort(s.Addr)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("bind 127.0.0.1\nport %s\ndir %s\nprotected-mode no\nloglevel warning\n"+
		"sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 2000\n"+
		"sentinel parallel-syncs %s 1\n",
		port, dir, name, host, mport, name, downAfter.Milliseconds(), name, name)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command("redis-sentinel", conf)
	s.cmd.SysProcAttr = childAttr()
	s.cmd.Stdout = &logWriter{t: t, prefix: "sentinel " + s.Addr + ": "}
	s.cmd.Stderr = s.cmd.Stdout
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start redis-sentinel: %v", err)
	}
	t.Cleanup(func() { _ = s.cmd.Process.Kill(); _ = s.cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for Ping(s.Addr) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("redis-sentinel on %s did not answer within 10s", s.Addr)
		}
		time.Sleep(10 * time.Millisecond) // polling a process we do not control
	}
	return s
}

// StartRedisCluster starts a Redis Cluster of three masters (no replicas)
// on loopback, its slots spread by redis-cli, and returns the nodes'
// addresses once the cluster is ok.
func StartRedisCluster(t testing.TB) []string {
	t.Helper()
	var addrs []string
	for range 3 {
		r := StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		addrs = append(addrs, r.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	out, err := exec.Command("redis-cli", append(args, "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		for _, a := range addrs {
			h, p, _ := net.SplitHostPort(a)
			info, _ := exec.Command("redis-cli", "-h", h, "-p", p, "cluster", "info").Output()
			ok = ok && strings.Contains(string(info), "cluster_state:ok")
		}
		if ok {
			return addrs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster on %v is not ok within 10s", addrs)
		}
		time.Sleep(20 * time.Millisecond) // polling processes we do not control
	}
}
