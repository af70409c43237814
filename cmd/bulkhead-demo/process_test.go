package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// asMainEnv makes the test binary run main's run instead of the tests, so
// that the tests can start the demo's modes as processes of their own.
const asMainEnv = "BULKHEAD_DEMO_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// process is bulkhead-demo (this test binary as main) running in a process
// of its own.
type process struct {
	cmd  *exec.Cmd
	out  *testkit.SyncBuffer // stdout and stderr
	done chan struct{}       // closed when reaped
	err  error               // Wait's, read after done
}

func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(os.Args[0], args...), out: &testkit.SyncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), asMainEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("output of %v:\n%s", args, p.out)
		}
	})
	return p
}

// signal sends sig to the process.
func (p *process) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// wait returns the exit error once the process has exited, failing the
// test after 60 s.
func (p *process) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(60 * time.Second):
		t.Fatalf("%v did not exit within 60s; output:\n%s", p.cmd.Args[1:], p.out)
		return nil
	}
}

// waitFor polls the output until it matches re and returns the submatches.
func (p *process) waitFor(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	testkit.Eventually(t, fmt.Sprintf("%v to print %q", p.cmd.Args[1:], re), func() bool {
		m = re.FindStringSubmatch(p.out.String())
		return m != nil
	})
	return m
}

var upstreamStarted = regexp.MustCompile(`upstream \w+ on (\S+) \(response time [^)]*\), control API on (\S+)\n`)

// The compose demo's pieces as plain processes on 127.0.0.1: three
// `upstream`s, and `traffic` through a stand-in for Envoy (a reverse proxy
// by path prefix) and the daemon (a fixed /metrics). traffic slows catalog
// through its control API, reads the peaks, and at SIGINT lets the slow
// requests in flight finish and counts them; a second run shows a second
// SIGINT cancelling them. The upstreams exit cleanly at SIGTERM.
func TestModesAsProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	upstreams := map[string]*process{}
	mux := http.NewServeMux()
	proxyTransport := &http.Transport{}
	t.Cleanup(proxyTransport.CloseIdleConnections)
	var control []string
	for _, r := range demoRoutes {
		p := startProcess(t, "upstream", r.name, "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0")
		m := p.waitFor(t, upstreamStarted)
		upstreams[r.name] = p
		target := &url.URL{Scheme: "http", Host: m[1]}
		proxy := httputil.NewSingleHostReverseProxy(target)
		proxy.Transport = proxyTransport
		proxy.ErrorLog = log.New(io.Discard, "", 0) // the second run's cancelled requests
		mux.Handle(r.path, proxy)
		control = append(control, r.name+"=http://"+m[2])
	}
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# TYPE bulkhead_admissions_paused gauge\nbulkhead_admissions_paused 0\n")
		for _, r := range demoRoutes {
			fmt.Fprintf(w, "bulkhead_limit{dependency=%q} 1000\n", r.name)
		}
	})
	standIn := httptest.NewServer(mux)
	defer standIn.Close()
	catalogControl := strings.TrimPrefix(control[0], "catalog=")

	traffic := func(delay, drain string) *process {
		return startProcess(t, "traffic", "--envoy", standIn.URL, "--metrics", standIn.URL+"/metrics",
			"--control", strings.Join(control, ","), "--slow-after", "1s", "--slow-for", "0",
			"--slow-delay", delay, "--drain-timeout", drain, "--wait", "30s")
	}
	// slowInFlight waits until catalog serves at least n requests at once.
	slowInFlight := func(n int) {
		t.Helper()
		testkit.Eventually(t, fmt.Sprintf("%d slow catalog requests in flight", n), func() bool {
			rep, err := takePeak(ctx, catalogControl)
			return err == nil && rep.Inflight >= n
		})
	}
	stopping := regexp.MustCompile(`Stopping traffic: letting the (\d+) requests in flight finish`)

	t.Run("first SIGINT lets them finish", func(t *testing.T) {
		p := traffic("800ms", "30s")
		p.waitFor(t, regexp.MustCompile(`catalog turned SLOW`))
		upstreams["catalog"].waitFor(t, regexp.MustCompile(`catalog: response time now 600ms-1s\n`))
		slowInFlight(10)
		p.signal(t, syscall.SIGINT)
		if err := p.wait(t); err != nil {
			t.Fatalf("traffic exited with %v:\n%s", err, p.out)
		}
		out := p.out.String()
		m := stopping.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no %q in:\n%s", stopping, out)
		}
		n, _ := strconv.Atoi(m[1])
		if want := fmt.Sprintf("%d requests were in flight when traffic stopped: all finished and are counted above.\n", n); n < 10 || !strings.Contains(out, want) {
			t.Errorf("want at least 10 in flight and %q in:\n%s", want, out)
		}
		// The peaks came from the upstreams' control API.
		if !regexp.MustCompile(`\n  catalog +\d+   limit 1000, within the limit\n`).MatchString(out) {
			t.Errorf("no peak for catalog in the summary:\n%s", out)
		}
	})

	t.Run("second SIGINT cancels them", func(t *testing.T) {
		// 4 s responses outlast the test's two signals (the client gives up at 5 s).
		p := traffic("4s", "1h")
		upstreams["catalog"].waitFor(t, regexp.MustCompile(`catalog: response time now 3s-5s\n`))
		slowInFlight(10)
		p.signal(t, syscall.SIGINT)
		p.waitFor(t, stopping)
		p.signal(t, syscall.SIGINT)
		if err := p.wait(t); err != nil {
			t.Fatalf("traffic exited with %v:\n%s", err, p.out)
		}
		if !regexp.MustCompile(`were cancelled by Ctrl-C\.\n`).MatchString(p.out.String()) {
			t.Errorf("the summary does not count requests cancelled by the second Ctrl-C:\n%s", p.out)
		}
	})

	for name, p := range upstreams {
		p.signal(t, syscall.SIGTERM)
		if err := p.wait(t); err != nil {
			t.Errorf("upstream %s exited with %v:\n%s", name, err, p.out)
		}
		if !strings.Contains(p.out.String(), "upstream "+name+" stopped after serving ") {
			t.Errorf("upstream %s did not report its stop:\n%s", name, p.out)
		}
	}
}

// takePeak calls POST /peak on an upstream's control API.
func takePeak(ctx context.Context, base string) (peakReport, error) {
	var rep peakReport
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+controlPeakPath, nil)
	if err != nil {
		return rep, err
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		return rep, err
	}
	return rep, json.Unmarshal(b.Bytes(), &rep)
}
