package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/admin/admintest"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// env is an admin server over a fake controller and an empty ledger, on
// a loopback port.
type env struct {
	fake   *admintest.Fake
	clk    *clock.Fake
	ledger *permit.Memory
	srv    *admin.Server
	addr   string
}

func newEnv(t *testing.T, authOpts ...admin.AuthOption) *env {
	t.Helper()
	return newEnvWith(t, nil, authOpts...)
}

// newEnvWith is newEnv with the admin server's options opts besides the
// clock and the ledger.
func newEnvWith(t *testing.T, opts []admin.Option, authOpts ...admin.AuthOption) *env {
	t.Helper()
	auth, err := admin.NewAuthenticator(authOpts...)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{clk: clock.NewFake(t0)}
	e.ledger = permit.NewMemory(e.clk)
	e.fake = admintest.NewFake(e.clk.Now, map[string]bulkhead.Settings{
		"catalog": {MaxConcurrent: 10, MaxQueue: 20, MaxWait: 500 * time.Millisecond, ReserveCritical: 0.2, ReserveNormal: 0.1},
		"auth":    {MaxConcurrent: 1, MaxQueue: 5},
	})
	e.fake.Mutate("catalog", func(st *admin.Status) {
		st.Snapshot.InUse = 3
		st.Snapshot.Queued[bulkhead.Normal] = 2
		st.Snapshot.Admitted[bulkhead.Normal] = 5
		st.Snapshot.Released = 2
		st.Outcomes = &admin.Outcomes{Success: 1, Failure: 1}
		st.Tenants = 2
	})
	e.srv = admin.New(e.fake, auth, admintest.Logger(), append([]admin.Option{admin.WithClock(e.clk), admin.WithLeases(e.ledger)}, opts...)...)
	e.addr = admintest.Start(t, e.srv)
	return e
}

// result is one run of bulkheadctl.
type result struct {
	code           int
	stdout, stderr string
}

// invocation runs bulkheadctl in the background.
type invocation struct {
	stdout, stderr *testkit.SyncBuffer
	done           chan int
}

func (inv *invocation) wait(t *testing.T) result {
	t.Helper()
	select {
	case code := <-inv.done:
		return result{code, inv.stdout.String(), inv.stderr.String()}
	case <-time.After(10 * time.Second):
		t.Fatalf("bulkheadctl did not finish; stdout:\n%s\nstderr:\n%s", inv.stdout, inv.stderr)
		return result{}
	}
}

func start(ctx context.Context, vars map[string]string, tty bool, args ...string) *invocation {
	inv := &invocation{stdout: &testkit.SyncBuffer{}, stderr: &testkit.SyncBuffer{}, done: make(chan int, 1)}
	getenv := func(k string) string { return vars[k] }
	go func() { inv.done <- run(ctx, args, getenv, inv.stdout, inv.stderr, tty) }()
	return inv
}

// ctl runs bulkheadctl against e (--addr is set unless vars set it) and
// waits for it.
func (e *env) ctl(t *testing.T, args ...string) result {
	t.Helper()
	return start(context.Background(), nil, false, append([]string{"--addr", e.addr}, args...)...).wait(t)
}

// advanceWhenWaiting moves the server's clock by d once a watch stream is
// waiting for its next reading, after calling mutate.
func (e *env) advanceWhenWaiting(t *testing.T, d time.Duration, mutate func()) {
	t.Helper()
	testkit.Eventually(t, "a watch stream to wait for its interval", func() bool { return e.clk.Timers() > 0 })
	if mutate != nil {
		mutate()
	}
	e.clk.Advance(d)
}

func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// lines trims the trailing spaces tabwriter leaves, for comparisons.
func lines(s string) string {
	ls := strings.Split(s, "\n")
	for i, l := range ls {
		ls[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(ls, "\n")
}

func check(t *testing.T, name string, r result, code int, stdout, stderr string) {
	t.Helper()
	if r.code != code {
		t.Errorf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", name, r.code, code, r.stdout, r.stderr)
	}
	if got := lines(r.stdout); stdout != "*" && got != stdout {
		t.Errorf("%s: stdout:\n%s\nwant:\n%s", name, got, stdout)
	}
	if got := r.stderr; stderr != "*" && got != stderr {
		t.Errorf("%s: stderr:\n%s\nwant:\n%s", name, got, stderr)
	}
}
