//go:build ignore

// hcprobe: what a real Envoy 1.40 running the shipped bootstrap sends to
// the daemon: connections, gRPC calls by path, and HTTP/2 PINGs, per
// connection, through a frame-counting TCP proxy in front of each daemon.
// Kept for the record (issue 28, health checks): run from the module root
// with `go run docs/perf/meshsim-health/hcprobe.go -variant replicas`
// (single, replicas or affinity); needs Envoy (.venv/bin/envoy) and
// redis-server. Its output: envoy-1.40.txt beside it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/bulkhead-mesh/bulkhead/e2e/meshsim"
	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

type connStats struct {
	mu     sync.Mutex
	id     int
	daemon int
	peer   string
	opened time.Time
	closed time.Time
	frames map[string]int
	pings  []time.Time // non-ACK PINGs from Envoy
	paths  map[string][]time.Time
}

type proxy struct {
	idx    int
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []*connStats
}

var nextID int
var idMu sync.Mutex

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		idMu.Lock()
		nextID++
		id := nextID
		idMu.Unlock()
		cs := &connStats{id: id, daemon: p.idx, peer: c.RemoteAddr().String(), opened: time.Now(), frames: map[string]int{}, paths: map[string][]time.Time{}}
		p.mu.Lock()
		p.conns = append(p.conns, cs)
		p.mu.Unlock()
		go p.handle(c, cs)
	}
}

func (p *proxy) handle(c net.Conn, cs *connStats) {
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(c, up); c.Close() }()
	tee := io.TeeReader(c, up)
	pre := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(tee, pre); err != nil {
		return
	}
	fr := http2.NewFramer(io.Discard, tee)
	fr.SetMaxReadFrameSize(1<<24 - 1)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 24
	defer func() { cs.mu.Lock(); cs.closed = time.Now(); cs.mu.Unlock() }()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if _, ok := err.(http2.StreamError); ok {
				continue
			}
			_, _ = io.Copy(io.Discard, tee)
			return
		}
		now := time.Now()
		cs.mu.Lock()
		cs.frames[f.Header().Type.String()]++
		switch f := f.(type) {
		case *http2.PingFrame:
			if !f.IsAck() {
				cs.pings = append(cs.pings, now)
			}
		case *http2.MetaHeadersFrame:
			path := f.PseudoValue("path")
			cs.paths[path] = append(cs.paths[path], now)
		}
		cs.mu.Unlock()
	}
}

func count(ts []time.Time, from, to time.Time) int {
	n := 0
	for _, t := range ts {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

func report(name string, proxies []*proxy, from, to time.Time) {
	secs := to.Sub(from).Seconds()
	fmt.Printf("\n== %s: %.1f s window (%s .. %s)\n", name, secs, from.Format("15:04:05.000"), to.Format("15:04:05.000"))
	for _, p := range proxies {
		p.mu.Lock()
		conns := append([]*connStats(nil), p.conns...)
		p.mu.Unlock()
		for _, cs := range conns {
			cs.mu.Lock()
			if !cs.closed.IsZero() && cs.closed.Before(from) || cs.opened.After(to) {
				cs.mu.Unlock()
				continue
			}
			var paths []string
			for path, ts := range cs.paths {
				paths = append(paths, fmt.Sprintf("%s=%d", path[strings.LastIndex(path, ".")+1:], count(ts, from, to)))
			}
			sort.Strings(paths)
			state := "open"
			if !cs.closed.IsZero() {
				state = "closed " + cs.closed.Format("15:04:05")
			}
			fmt.Printf("daemon %d conn %d from %s (opened %s, %s): PINGs %d (%.2f/s), calls in window %v\n",
				cs.daemon, cs.id, cs.peer, cs.opened.Format("15:04:05.000"), state, count(cs.pings, from, to), float64(count(cs.pings, from, to))/secs, paths)
			cs.mu.Unlock()
		}
	}
}

func main() {
	variant := flag.String("variant", "replicas", "single (one in-memory daemon), replicas (two on Redis), affinity (two on Redis, BulkheadAffinity)")
	window := flag.Duration("window", 10*time.Second, "each window")
	flag.Parse()
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "hcprobe-")
	defer os.RemoveAll(dir)
	bin, err := meshsim.BuildDaemon(ctx, dir)
	must(err)
	ledger := ""
	daemons := 1
	if *variant != "single" {
		daemons = 2
		rs, err := redisproc.Start(ctx, dir, "hcprobe")
		must(err)
		defer rs.Stop()
		ledger = fmt.Sprintf("ledger: {backend: redis, on_unavailable: fail_closed, redis: {address: %q}}\n", rs.Addr())
	}
	routes := []meshsim.Route{{Bulkhead: "r0"}}
	var proxies []*proxy
	var eps []envoy.Endpoint
	for i := range daemons {
		ddir := fmt.Sprintf("%s/d%d", dir, i)
		must(os.MkdirAll(ddir, 0o755))
		addr, err := meshsim.FreePort()
		must(err)
		d, err := meshsim.StartDaemon(ctx, bin, ddir, meshsim.DaemonConfig(addr, routes, false, ledger))
		must(err)
		defer d.Stop()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(err)
		p := &proxy{idx: i, ln: ln, target: d.GRPC}
		go p.serve()
		proxies = append(proxies, p)
		port := ln.Addr().(*net.TCPAddr).Port
		eps = append(eps, envoy.Endpoint{Host: "127.0.0.1", Port: port})
		fmt.Printf("daemon %d: pid %d grpc %s, proxied at %s\n", i, d.PID(), d.GRPC, ln.Addr())
	}
	up, err := testbed.NewUpstream("probe", "")
	must(err)
	defer up.Close()
	h, ps, _ := net.SplitHostPort(up.Addr())
	upPort, _ := strconv.Atoi(ps)
	params := envoy.Params{NodeID: "hcprobe", Bulkhead: eps[0], BulkheadReplicas: eps[1:], BulkheadAffinity: *variant == "affinity",
		Routes: []envoy.Route{{Name: "r0", Prefix: "/r0", Upstream: envoy.Endpoint{Host: h, Port: upPort}}}}
	boot, err := envoy.Render(params)
	must(err)
	must(os.WriteFile(dir+"/envoy.yaml", boot, 0o644))
	proxy, err := envoyproc.Start(ctx, envoyproc.Options{ConfigYAML: boot, Concurrency: 2})
	must(err)
	defer func() { _ = proxy.Stop(ctx) }()
	fmt.Printf("envoy pid %d (concurrency 2), variant %s\n", proxy.PID(), *variant)
	front, err := proxy.ListenerAddr(ctx, envoy.DefaultListenerName)
	must(err)

	time.Sleep(3 * time.Second)
	t0 := time.Now()
	time.Sleep(*window)
	t1 := time.Now()
	report("idle, no request sent yet", proxies, t0, t1)
	ss(eps, proxy.PID())

	// Load: 50 requests/s for the window, from several client connections.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Get("http://" + front + "/r0/x")
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
	}()
	time.Sleep(2 * time.Second)
	t2 := time.Now()
	time.Sleep(*window)
	t3 := time.Now()
	close(stop)
	wg.Wait()
	report("load, 50 requests/s", proxies, t2, t3)
	ss(eps, proxy.PID())
	time.Sleep(2 * time.Second)
	t4 := time.Now()
	time.Sleep(*window)
	t5 := time.Now()
	report("idle after load", proxies, t4, t5)
	stats, err := proxy.Stats(ctx)
	if err == nil {
		var keys []string
		for k := range stats {
			if strings.HasPrefix(k, "cluster.bulkhead") && (strings.Contains(k, "health_check.") || strings.Contains(k, "upstream_cx_total") || strings.Contains(k, "upstream_cx_active")) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		fmt.Println("\nEnvoy stats:")
		for _, k := range keys {
			fmt.Printf("  %s: %d\n", k, stats[k])
		}
	}
}

func ss(eps []envoy.Endpoint, pid int) {
	for _, e := range eps {
		out, _ := exec.Command("ss", "-tnpH", "state", "established", "dst", e.String()).CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		n := 0
		for _, l := range lines {
			if strings.Contains(l, fmt.Sprintf("pid=%d,", pid)) {
				n++
			}
		}
		fmt.Printf("ss -tnp state established dst %s: %d connections from envoy pid %d\n%s\n", e, n, pid, strings.TrimSpace(string(out)))
	}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "hcprobe:", err)
		os.Exit(1)
	}
}
