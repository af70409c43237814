package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// drivenDemo is a demo whose one flow sends catalog requests at 200/s
// straight to u (no Envoy, no daemon: its /metrics is refused), run by drive
// in a goroutine until the test ends ctx and abort.
type drivenDemo struct {
	d           *demo
	out         *testkit.SyncBuffer
	stop, abort context.CancelFunc
	done        chan error
	flow        *flow
}

func driveAgainst(t *testing.T, u *testbed.Upstream, opts options) *drivenDemo {
	t.Helper()
	out := &testkit.SyncBuffer{}
	d := newDemo(opts, out)
	d.metricsURL = "http://127.0.0.1:1/metrics"
	f := &flow{route: "catalog", rate: 200}
	d.flows = []*flow{f}
	if err := newLoads(d.flows, u.URL(), 0); err != nil {
		t.Fatal(err)
	}
	abortCtx, abort := context.WithCancel(context.Background())
	ctx, stop := context.WithCancel(abortCtx)
	dd := &drivenDemo{d: d, out: out, stop: stop, abort: abort, done: make(chan error, 1), flow: f}
	go func() { dd.done <- d.drive(ctx, abortCtx) }()
	t.Cleanup(func() {
		abort()
		_ = dd.wait(t)
	})
	return dd
}

// wait returns drive's error, failing the test if drive does not return
// within 30 s.
func (dd *drivenDemo) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-dd.done:
		dd.done <- err // for the next wait
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("drive did not return within 30s; output:\n%s", dd.out)
		return nil
	}
}

// The first Ctrl-C (ctx's end) stops sending; the requests in flight then
// finish, are answered and counted, and the summary says so. With the next
// Ctrl-C (abort) or the end of --drain-timeout, those still out are
// cancelled and counted as cancelled.
func TestCtrlCLetsRequestsInFlightFinish(t *testing.T) {
	tests := []struct {
		name  string
		drain time.Duration
		// end ends the wait for the held requests: it releases them, or
		// sends the second Ctrl-C, or does nothing (the timeout ends it).
		end     func(u *testbed.Upstream, dd *drivenDemo)
		finish  bool   // the held requests finish, else they are cancelled
		summary string // with %d for the requests in flight at the stop
	}{
		{"they finish", time.Hour, func(u *testbed.Upstream, _ *drivenDemo) { u.ReleaseHeld() }, true,
			"%d requests were in flight when traffic stopped: all finished and are counted above.\n"},
		{"second Ctrl-C cuts the wait", time.Hour, func(_ *testbed.Upstream, dd *drivenDemo) { dd.abort() }, false,
			"%[1]d requests were in flight when traffic stopped: 0 finished and are counted above, %[1]d were cancelled by Ctrl-C.\n"},
		{"the wait runs out", 50 * time.Millisecond, func(*testbed.Upstream, *drivenDemo) {}, false,
			"%[1]d requests were in flight when traffic stopped: 0 finished and are counted above, %[1]d were cancelled when the 50ms wait ran out (--drain-timeout).\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			u, err := testbed.NewUpstream("catalog", "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = u.Close() })
			u.Hold()
			dd := driveAgainst(t, u, options{drainTimeout: tc.drain})
			if err := u.WaitInflight(ctx, 10); err != nil {
				t.Fatal(err)
			}
			dd.stop() // Ctrl-C
			testkit.Eventually(t, "drive to stop sending", func() bool {
				return strings.Contains(dd.out.String(), "Stopping traffic: letting the ")
			})
			sentAtStop := dd.flow.load.Snapshot().Sent
			tc.end(u, dd)
			if err := dd.wait(t); err != nil {
				t.Fatalf("drive: %v", err)
			}

			s := dd.flow.result
			if s.Sent != sentAtStop || dd.d.inFlightAtStop != sentAtStop || sentAtStop < 10 {
				t.Errorf("sent %d, %d at the stop, %d in flight at the stop: want all equal and >= 10 (none sent after Ctrl-C)",
					s.Sent, sentAtStop, dd.d.inFlightAtStop)
			}
			wantOK, wantCancelled := s.Sent, 0
			if !tc.finish {
				wantOK, wantCancelled = 0, s.Sent
			}
			if s.OK() != wantOK || s.Cancelled != wantCancelled || s.TransportErrors != 0 {
				t.Errorf("ok %d cancelled %d transport errors %d, want %d/%d/0", s.OK(), s.Cancelled, s.TransportErrors, wantOK, wantCancelled)
			}
			if tc.finish && u.Served() != s.Sent {
				t.Errorf("upstream served %d, want the %d sent", u.Served(), s.Sent)
			}
			if want := fmt.Sprintf(tc.summary, sentAtStop); !strings.Contains(dd.out.String(), want) {
				t.Errorf("summary lacks %q:\n%s", want, dd.out)
			}
		})
	}
}
