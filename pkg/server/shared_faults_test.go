package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// A misbehaving Redis: each fault gets a log line that says what, a metric,
// and the configured policy, and the daemon keeps serving.
func TestSharedLedgerFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, srv *testkit.Redis) (extra string)
		log    string // in the daemon's log
		result string // of bulkhead_ledger_calls_total
	}{
		{"wrong password", func(t *testing.T, srv *testkit.Redis) string {
			redisDo(t, srv.Addr, "CONFIG", "SET", "requirepass", "right")
			return "password_file: " + secretFile(t, "wrong")
		}, "WRONGPASS", "error"},
		{"errors (no script permission)", func(t *testing.T, srv *testkit.Redis) string {
			redisDo(t, srv.Addr, "ACL", "SETUSER", "bulkhead", "on", ">pw", "~*", "&*", "+@all", "-@scripting")
			return "username: bulkhead, password_file: " + secretFile(t, "pw")
		}, "NOPERM", "error"},
		{"answers after the deadline", func(t *testing.T, srv *testkit.Redis) string {
			return ""
		}, "redis ledger unavailable", "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testkit.StartRedis(t)
			extra := tc.setup(t, srv)
			yaml := sharedYAML(srv.Addr, "fail_closed")
			if extra != "" {
				yaml = strings.Replace(yaml, "timeout: 200ms}", "timeout: 200ms, "+extra+"}", 1)
			}
			var log testkit.SyncBuffer
			rn := startLogged(t, parseConfig(t, yaml), slog.New(slog.NewTextHandler(&log, nil)))
			if tc.result == "timeout" {
				waitStrict(t, rn)
				srv.Stop()
				t.Cleanup(srv.Continue)
			}
			start := time.Now()
			if _, r := check(t, rn, "auth"); r != "ledger_unavailable" {
				t.Fatalf("Check: reason %q, want ledger_unavailable", r)
			}
			if took := time.Since(start); took > time.Second {
				t.Fatalf("the Check took %v", took)
			}
			testkit.Eventually(t, "a log line naming the fault", func() bool { return strings.Contains(log.String(), tc.log) })
			testkit.Eventually(t, "a failed call counted", func() bool { return sumSeries(t, rn, "bulkhead_ledger_calls_total", "result", tc.result) > 0 })
			if code, _ := rn.get(t, "/healthz"); code != 200 {
				t.Fatalf("/healthz = %d: the daemon stopped serving", code)
			}
		})
	}
}

func redisDo(t *testing.T, addr string, args ...any) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("redis %v: %v", args, err)
	}
}

func secretFile(t *testing.T, v string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// sumSeries adds up the series of a counter whose label is value.
func sumSeries(t *testing.T, rn *running, name, label, value string) float64 {
	t.Helper()
	mfs, err := rn.r.promReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
