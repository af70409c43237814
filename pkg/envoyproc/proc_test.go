package envoyproc_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc/envoyproctest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// unusedPort returns a port that was free a moment ago; nothing listens on it.
func unusedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// config renders the front proxy on port 0 with every endpoint unused:
// Envoy still becomes ready.
func config(t *testing.T) []byte {
	t.Helper()
	ep := func() envoy.Endpoint { return envoy.Endpoint{Host: "127.0.0.1", Port: unusedPort(t)} }
	b, err := envoy.Render(envoy.Params{
		Bulkhead: ep(),
		Routes:   envoy.DemoRoutes(ep(), ep(), ep()),
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStartStop(t *testing.T) {
	bin := envoyproctest.Binary(t)
	ctx := t.Context()
	p, err := envoyproc.Start(ctx, envoyproc.Options{Binary: bin, ConfigYAML: config(t), Stderr: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}

	addr, err := p.ListenerAddr(ctx, envoy.DefaultListenerName)
	if err != nil {
		t.Fatal(err)
	}
	if _, port, _ := net.SplitHostPort(addr); port == "0" || port == "" {
		t.Fatalf("ListenerAddr = %q, want a bound port", addr)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial listener: %v", err)
	}
	conn.Close()
	if _, err := p.ListenerAddr(ctx, "nope"); !errors.Is(err, envoyproc.ErrNoListener) {
		t.Errorf("ListenerAddr(nope) error = %v, want ErrNoListener", err)
	}

	stats, err := p.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := stats["server.concurrency"]; !ok || got != envoyproc.DefaultConcurrency {
		t.Errorf("server.concurrency = %d (present %v), want %d", got, ok, envoyproc.DefaultConcurrency)
	}
	if _, ok := stats["cluster.bulkhead.upstream_rq_total"]; !ok {
		t.Errorf("stats lack cluster.bulkhead.upstream_rq_total; have %d stats", len(stats))
	}

	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := p.Wait(); err != nil {
		t.Errorf("Wait after Stop = %v, want nil", err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Errorf("second Stop = %v, want nil", err)
	}
	if err := syscallAlive(p.PID()); err == nil {
		t.Errorf("envoy pid %d still alive after Stop", p.PID())
	}
}

func TestKill(t *testing.T) {
	bin := envoyproctest.Binary(t)
	ctx := t.Context()
	p, err := envoyproc.Start(ctx, envoyproc.Options{Binary: bin, ConfigYAML: config(t), Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	var exitErr *exec.ExitError
	if err := p.Wait(); !errors.As(err, &exitErr) {
		t.Errorf("Wait after Kill = %v, want an *exec.ExitError", err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Errorf("Stop after Kill = %v, want nil", err)
	}
	if _, err := p.Stats(ctx); err == nil {
		t.Error("Stats after Kill succeeded")
	}
}

// Two instances side by side: distinct base ids and ports.
func TestConcurrentInstances(t *testing.T) {
	a := envoyproctest.Start(t, envoyproc.Options{ConfigYAML: config(t), Concurrency: 1})
	b := envoyproctest.Start(t, envoyproc.Options{ConfigYAML: config(t), Concurrency: 1})
	if a.AdminAddr() == b.AdminAddr() {
		t.Fatalf("both instances have admin %s", a.AdminAddr())
	}
}

func TestStartErrors(t *testing.T) {
	bin := envoyproctest.Binary(t)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		opts envoyproc.Options
		want []error
	}{
		{"no config", t.Context(), envoyproc.Options{Binary: bin}, []error{envoyproc.ErrNoConfig}},
		{"bad config", t.Context(), envoyproc.Options{Binary: bin, ConfigYAML: []byte("static_resources: [")},
			[]error{envoyproc.ErrNotReady, envoyproc.ErrExited}},
		{"cancelled", cancelled, envoyproc.Options{Binary: bin, ConfigYAML: config(t)},
			[]error{envoyproc.ErrNotReady, context.Canceled}},
		{"missing binary", t.Context(), envoyproc.Options{Binary: "/nonexistent/envoy", ConfigYAML: config(t)},
			[]error{os.ErrNotExist}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := envoyproc.Start(tt.ctx, tt.opts)
			if err == nil {
				_ = p.Kill()
				t.Fatal("Start succeeded")
			}
			for _, want := range tt.want {
				if !errors.Is(err, want) {
					t.Errorf("Start error = %v, want it to wrap %v", err, want)
				}
			}
		})
	}
}

func TestStopTimeoutKills(t *testing.T) {
	p := envoyproctest.Start(t, envoyproc.Options{ConfigYAML: config(t), Concurrency: 1})
	// Freeze Envoy: it cannot answer /quitquitquit, so Stop must kill it.
	if err := syscallStop(p.PID()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := p.Stop(ctx); !errors.Is(err, envoyproc.ErrKilled) {
		t.Fatalf("Stop of a frozen envoy = %v, want ErrKilled", err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Stop returned")
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("envoy: %s", b)
	return len(b), nil
}
