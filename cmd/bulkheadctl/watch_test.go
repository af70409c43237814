package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestWatch(t *testing.T) {
	e := newEnv(t)
	inv := start(context.Background(), nil, false, "watch", "--addr", e.addr, "--interval", "2s", "--count", "2")
	e.advanceWhenWaiting(t, 2*time.Second, func() {
		e.fake.Mutate("auth", func(st *admin.Status) {
			st.Snapshot.InUse = 1
			st.Snapshot.Admitted[bulkhead.BestEffort] += 5
			st.Snapshot.Rejected[bulkhead.ReasonTimeout]++
		})
	})
	check(t, "watch", inv.wait(t), 0, e.addr+`  every 2s  2026-03-01T12:00:00Z

BULKHEAD  KIND      LIMIT  ACTIVE  QUEUED  ADMITTED/S  REJECTED/S  FAILURES/S  SOURCE
auth      requests  1      0       0       -           -           -           file
catalog   requests  10     3       2       -           -           -           file

`+e.addr+`  every 2s  2026-03-01T12:00:02Z

BULKHEAD  KIND      LIMIT  ACTIVE  QUEUED  ADMITTED/S  REJECTED/S  FAILURES/S  SOURCE
auth      requests  1      1       0       2.5         0.5         -           file
catalog   requests  10     3       2       0.0         0.0         0.0         file
`, "")
}

func TestWatchTerminalRedraws(t *testing.T) {
	e := newEnv(t)
	inv := start(context.Background(), nil, true, "watch", "--addr", e.addr, "--count", "2")
	e.advanceWhenWaiting(t, time.Second, nil)
	r := inv.wait(t)
	if r.code != 0 || strings.Count(r.stdout, "\x1b[H\x1b[2J") != 2 || !strings.HasPrefix(r.stdout, "\x1b[H\x1b[2J") {
		t.Errorf("exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestWatchCtrlC(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inv := start(ctx, nil, false, "watch", "--addr", e.addr)
	testkit.Eventually(t, "the first table", func() bool { return strings.Contains(inv.stdout.String(), "catalog") })
	cancel()
	r := inv.wait(t)
	if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "BULKHEAD") {
		t.Errorf("after Ctrl-C: %+v", r)
	}
}

func TestWatchServerStops(t *testing.T) {
	e := newEnv(t)
	inv := start(context.Background(), nil, false, "watch", "--addr", e.addr)
	e.advanceWhenWaiting(t, 0, nil)
	e.srv.Stop()
	r := inv.wait(t)
	want := "bulkheadctl: the admin API at " + e.addr + " is shutting down\n"
	check(t, "watch", r, 3, "*", want)
}

func TestCannotConnect(t *testing.T) {
	addr := closedAddr(t)
	want := "bulkheadctl: cannot connect to the admin API at " + addr + ": connection refused — is bulkhead running with listen.admin set?\n"
	for _, args := range [][]string{{"status"}, {"status", "--sample", "0"}, {"get", "x"}, {"set", "x", "--max-queue", "1"}, {"reset", "x"}, {"watch"}} {
		r := start(context.Background(), map[string]string{"BULKHEADCTL_ADDR": addr}, false, args...).wait(t)
		check(t, strings.Join(args, " "), r, 3, "", want)
	}
}

func TestToken(t *testing.T) {
	const tok = "a-token-for-the-cli"
	e := newEnv(t, admin.WithToken(tok))
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		vars   map[string]string
		args   []string
		code   int
		stderr string
	}{
		{"none", nil, nil, 3, "bulkheadctl: the admin API at " + e.addr + " refused the credentials: missing credentials: send \"authorization: Bearer TOKEN\" — pass --token, --token-file or set BULKHEADCTL_TOKEN\n"},
		{"wrong", nil, []string{"--token", "nope"}, 3, "bulkheadctl: the admin API at " + e.addr + " refused the credentials: wrong token — check the token (--token, --token-file or BULKHEADCTL_TOKEN)\n"},
		{"flag", nil, []string{"--token", tok}, 0, ""},
		{"flag after the command", nil, []string{"--token=" + tok}, 0, ""},
		{"env", map[string]string{"BULKHEADCTL_TOKEN": tok}, nil, 0, ""},
		{"file", nil, []string{"--token-file", file}, 0, ""},
		{"missing file", nil, []string{"--token-file", file + ".missing"}, 2, "*"},
	}
	for _, tc := range tests {
		args := append([]string{"--addr", e.addr, "status", "--sample", "0"}, tc.args...)
		r := start(context.Background(), tc.vars, false, args...).wait(t)
		check(t, tc.name, r, tc.code, "*", tc.stderr)
	}
}

func TestAddrFromEnv(t *testing.T) {
	e := newEnv(t)
	r := start(context.Background(), map[string]string{"BULKHEADCTL_ADDR": e.addr}, false, "get", "auth").wait(t)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "NAME            auth\n") {
		t.Errorf("%+v", r)
	}
}

func TestHelp(t *testing.T) {
	main := start(context.Background(), nil, false, "--help").wait(t)
	check(t, "--help", main, 0, "*", "")
	for _, want := range []string{"Commands:", "status", "watch", "--addr", "BULKHEADCTL_TOKEN", "Exit codes:\n  0  success"} {
		if !strings.Contains(main.stdout, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	if h := start(context.Background(), nil, false, "help").wait(t); h.stdout != main.stdout || h.code != 0 {
		t.Errorf("help differs from --help")
	}
	for _, c := range commands() {
		byHelp := start(context.Background(), nil, false, "help", c.name).wait(t)
		byFlag := start(context.Background(), nil, false, c.name, "--help").wait(t)
		byShort := start(context.Background(), nil, false, c.name, "-h").wait(t)
		check(t, "help "+c.name, byHelp, 0, "*", "")
		check(t, c.name+" --help", byFlag, 0, byHelp.stdout, "")
		check(t, c.name+" -h", byShort, 0, byHelp.stdout, "")
		for _, want := range []string{"Usage:\n  bulkheadctl " + c.name, "Global flags:", "--addr", "Exit codes:"} {
			if !strings.Contains(byHelp.stdout, want) {
				t.Errorf("help %s lacks %q:\n%s", c.name, want, byHelp.stdout)
			}
		}
	}
}
