package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const baseYAML = `
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
leases: {default_ttl: 30s, sweep_interval: 50ms}
bulkheads:
  catalog: {max_concurrent: 10, max_queue: 20, max_wait: 500ms, lease_ttl: 10s}
  auth: {max_concurrent: 1, max_queue: 5, max_wait: 0s}
`

func parseConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// running is a Runner serving in a goroutine.
type running struct {
	r      *Runner
	addrs  map[string]string
	cancel context.CancelFunc
	done   chan error
	conn   *grpc.ClientConn
	http   *http.Client
}

// start runs a Runner for cfg until the test ends (or stop is called) and
// waits for its address file. Admissions start at once (no recovery
// window); startRecovering keeps the configured window.
func start(t *testing.T, cfg *config.Config, opts ...Option) *running {
	t.Helper()
	cfg.Leases.RecoveryWindow = 0
	return startRecovering(t, cfg, opts...)
}

// startRecovering is start with cfg's recovery window.
func startRecovering(t *testing.T, cfg *config.Config, opts ...Option) *running {
	t.Helper()
	return startLogged(t, cfg, slog.New(slog.DiscardHandler), opts...)
}

// startLogged is startRecovering logging to log.
func startLogged(t *testing.T, cfg *config.Config, log *slog.Logger, opts ...Option) *running {
	t.Helper()
	path := filepath.Join(t.TempDir(), "addr.json")
	r, err := New(cfg, log, append([]Option{WithAddressFile(path)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn := &running{r: r, cancel: cancel, done: make(chan error, 1),
		http: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	go func() { rn.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rn.done:
		case <-time.After(15 * time.Second):
			t.Error("Run did not return")
		}
	})
	testkit.Eventually(t, "address file", func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		return json.Unmarshal(b, &rn.addrs) == nil
	})
	conn, err := grpc.NewClient(rn.addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rn.conn = conn
	return rn
}

// stop cancels Run and returns its result and how long it took.
func (rn *running) stop(t *testing.T) (time.Duration, error) {
	t.Helper()
	begin := time.Now()
	rn.cancel()
	select {
	case err := <-rn.done:
		rn.done <- err // for the cleanup
		return time.Since(begin), err
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15s of cancel")
		return 0, nil
	}
}

func (rn *running) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := rn.http.Get("http://" + rn.addrs["http"] + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}
