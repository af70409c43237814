package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
	"github.com/bulkhead-mesh/bulkhead/pkg/version"
)

func TestMain(m *testing.M) {
	// signal.NotifyContext starts the os/signal loop, which lives forever.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("os/signal.signal_recv"), goleak.IgnoreAnyFunction("os/signal.loop"))
}

func TestRunExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   []string // substrings
		stderr   []string
		noStdout bool
	}{
		{"help", []string{"--help"}, 0, []string{
			"bulkhead enforces concurrency bulkheads for an Envoy mesh",
			"--config", "--listen-grpc", "--check-config", "--address-file", "--version",
			"BULKHEAD_<PATH>", "BULKHEAD_LISTEN_GRPC", "BULKHEAD_ADMIN_TOKEN",
			"pkg/config/testdata/example.yaml",
			"Exit codes:", "  1  serving failed", "  2  usage error, or the configuration was refused",
		}, nil, false},
		{"short help", []string{"-h"}, 0, []string{"Usage:", "--config"}, nil, false},
		{"help wins over the rest", []string{"--config", "testdata/nope.yaml", "--check-config", "--help"}, 0, []string{"Usage:"}, nil, false},
		{"version", []string{"--version"}, 0, []string{version.String("bulkhead") + "\n"}, nil, false},
		{"unknown flag", []string{"--bogus"}, 2, nil, []string{"bulkhead: unknown flag: --bogus (see bulkhead --help)"}, true},
		{"flag without value", []string{"--config"}, 2, nil, []string{"config"}, true},
		{"positional argument", []string{"--config", "testdata/good.yaml", "extra"}, 2, nil, []string{`unexpected arguments ["extra"]`}, true},
		{"config as positional", []string{"testdata/good.yaml"}, 2, nil, []string{"--config"}, true},
		{"missing file", []string{"--config", "testdata/nope.yaml", "--check-config"}, 2, nil, []string{"configuration refused", "nope.yaml"}, true},
		{"bad config", []string{"--config", "testdata/bad.yaml"}, 2, nil, []string{
			"configuration refused",
			"log.level", "authz.deny_status", "authz.unknown_bulkhead",
			"bulkheads.catalog.max_concurrent", "bulkheads.catalog.max_concurent", "bulkheads.auth.max_wait",
		}, true},
		{"bad config, check only", []string{"--check-config", "--config", "testdata/bad.yaml"}, 2, nil, []string{"authz.deny_status"}, true},
		{"bad flag value", []string{"--config", "testdata/good.yaml", "--log-level", "loud", "--check-config"}, 2, nil, []string{"log.level", "loud"}, true},
		{"bad listen flag", []string{"--config", "testdata/good.yaml", "--listen-grpc", "nowhere", "--check-config"}, 2, nil, []string{"listen.grpc"}, true},
		{"check good config", []string{"--config", "testdata/good.yaml", "--check-config"}, 0,
			[]string{"configuration OK: 2 bulkheads, grpc 127.0.0.1:0, http 127.0.0.1:0"}, nil, false},
		{"check, no config", []string{"--check-config"}, 1, nil, []string{
			"bulkhead: no --config given and no bulkheads configured: every request would be handled by authz.unknown_bulkhead, which is deny: each is rejected with HTTP 503, reason unknown_bulkhead",
		}, true},
		{"check, file without bulkheads", []string{"--check-config", "--config", "testdata/empty.yaml"}, 1, nil, []string{
			"bulkhead: testdata/empty.yaml configures no bulkheads: every request would be handled by authz.unknown_bulkhead, which is deny: each is rejected with HTTP 429",
		}, true},
		{"check, deprecated settings", []string{"--check-config", "--config", "testdata/local_share.yaml"}, 0, []string{
			"configuration OK: 1 bulkheads",
			"warning: testdata/local_share.yaml: ledger.local_share_for: has no effect since local_share became capacity leases",
			"warning: testdata/local_share.yaml: ledger.on_unavailable: is deprecated and read as ledger.redis.capacity_leases: true " +
				"with ledger.on_unavailable: fail_closed",
			`write on_unavailable: fail_closed (or fail_open) instead (got "local_share")`,
		}, nil, false},
		{"check with overrides", []string{"--config=testdata/good.yaml", "--listen-grpc=127.0.0.1:7001", "--check-config"}, 0,
			[]string{"grpc 127.0.0.1:7001"}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr testkit.SyncBuffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Fatalf("run(%q) = %d, want %d\nstdout: %s\nstderr: %s", tt.args, code, tt.code, stdout.String(), stderr.String())
			}
			for _, want := range tt.stdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
			for _, want := range tt.stderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
			if tt.noStdout && stdout.String() != "" {
				t.Errorf("stdout not empty: %s", stdout.String())
			}
			if tt.code == 0 && stderr.String() != "" {
				t.Errorf("stderr not empty: %s", stderr.String())
			}
		})
	}
}

// The daemon serves until SIGTERM and then exits 0.
func TestRunServesUntilSIGTERM(t *testing.T) {
	log := serveUntilSIGTERM(t, "--config", "testdata/good.yaml", "--log-level", "info")
	// --log-level info overrides the file's warn; the format is the file's json.
	if !strings.Contains(log, `"msg":"serving"`) || !strings.Contains(log, `"msg":"stopped"`) {
		t.Errorf("log lacks the JSON serving/stopped lines:\n%s", log)
	}
	if strings.Contains(log, "unknown_bulkhead") {
		t.Errorf("log warns of no bulkheads:\n%s", log)
	}
}

// Without bulkheads the daemon warns and serves.
func TestRunWithoutBulkheadsWarns(t *testing.T) {
	t.Setenv("BULKHEAD_LISTEN_GRPC", "127.0.0.1:0")
	t.Setenv("BULKHEAD_LISTEN_HTTP", "127.0.0.1:0")
	t.Setenv("BULKHEAD_LISTEN_ADMIN", "127.0.0.1:0")
	t.Setenv("BULKHEAD_AUTHZ_UNKNOWN_BULKHEAD", "allow")
	log := serveUntilSIGTERM(t, "--log-format", "json")
	want := `"level":"WARN","msg":"no --config given and no bulkheads configured: every request would be handled by authz.unknown_bulkhead, which is allow: each is admitted without a limit, so nothing is bounded"`
	if !strings.Contains(log, want) {
		t.Errorf("log lacks %s:\n%s", want, log)
	}
}

// serveUntilSIGTERM runs the daemon with args until it serves /readyz,
// sends SIGTERM, checks that it exits 0 and returns its log.
func serveUntilSIGTERM(t *testing.T, args ...string) string {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr.json")
	var stdout, stderr testkit.SyncBuffer
	done := make(chan int, 1)
	args = append(args, "--address-file", addrFile)
	go func() { done <- run(args, &stdout, &stderr) }()
	var addrs map[string]string
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && json.Unmarshal(b, &addrs) == nil {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("run exited %d before serving: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no address file within 10s")
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addrs["http"] + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/readyz = %d", resp.StatusCode)
	}

	// run registered its signal handler before it wrote the address file.
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run exited %d after SIGTERM, want 0: %s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not exit within 15s of SIGTERM")
	}
	return stderr.String()
}

func TestCheckConfigWithoutBulkheadsAllow(t *testing.T) {
	t.Setenv("BULKHEAD_AUTHZ_UNKNOWN_BULKHEAD", "allow")
	var stdout, stderr testkit.SyncBuffer
	if code := run([]string{"--check-config"}, &stdout, &stderr); code != 1 {
		t.Fatalf("--check-config = %d, want 1: %s", code, stderr.String())
	}
	want := "which is allow: each is admitted without a limit"
	if !strings.Contains(stderr.String(), want) || stdout.String() != "" {
		t.Errorf("stderr lacks %q or stdout not empty:\nstdout: %s\nstderr: %s", want, stdout.String(), stderr.String())
	}
}
