//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// Issue 6, scenario 2: the service ends every access-log stream mid-load
// (listen.grpc_max_connection_age: GOAWAY, then the connection is closed
// after the grace, cutting the streams). Envoy reconnects, releases resume,
// permits whose entries were cut off are reclaimed by their 3 s heartbeat
// lease, and the active count returns to 0.
func TestFaultStreamsResetByServer(t *testing.T) {
	const lease = 3 * time.Second // leases.heartbeat_ttl
	fs := startFaultStack(t, faultSpec{
		listen: "grpc_max_connection_age: 2s, grpc_max_connection_age_grace: 1s",
		yaml: `
leases: {sweep_interval: 100ms}
bulkheads:
  catalog: {max_concurrent: 10, max_queue: 20, max_wait: 300ms}
`,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	fs.up["catalog"].SetDelayRange(50*time.Millisecond, 250*time.Millisecond)

	_, waitLoad := runLoad(t, ctx, testbed.LoadSpec{URL: fs.base + "/catalog", Rate: 40, Duration: 7 * time.Second,
		MaxRequests: 400, MaxOutstanding: 64, Timeout: 10 * time.Second})
	cut := func() int { return fs.logCount("access-log stream ended") + fs.logCount("access-log stream broken") }
	poll(t, ctx, "the first access-log stream cut by the server", func() bool { return cut() > 0 })
	releasedAtCut := fs.counter("bulkhead_releases_total", map[string]string{"source": "access_log"})
	st := waitLoad()
	loadEnd := time.Now()

	if got := fs.counter("bulkhead_releases_total", map[string]string{"source": "access_log"}); got < releasedAtCut+50 {
		t.Errorf("access-log releases went from %v at the first cut to %v: they did not resume", releasedAtCut, got)
	}
	opened, cuts := fs.logCount("access-log stream opened"), cut()
	t.Logf("streams opened %d, cut %d; load: %d sent, statuses %v, transport errors %d", opened, cuts, st.Sent, st.ByStatus, st.TransportErrors)
	if cuts < 2 || opened < 4 {
		t.Errorf("streams opened %d, cut %d: want several cycles", opened, cuts)
	}
	// Checks in flight finish within the grace, so no request failed.
	if st.TransportErrors != 0 || !st.RejectionsWellFormed() || st.OK()+st.Rejections != st.Responses() {
		t.Errorf("load saw failures beyond bulkhead rejections: %+v", st)
	}
	fs.waitGauge("bulkhead_active_calls", "catalog", 0, lease+2*time.Second-time.Since(loadEnd))
	m := fs.metrics()
	t.Logf("entries lost with the cut streams, reclaimed by lease: %v", m.Sum("bulkhead_permits_expired_total", nil))
}

// Issue 6, scenario 3: the service is SIGKILLed under load and restarted on
// the same port. Fail closed, requests during the outage get Envoy's
// status_on_error (without Bulkhead's headers); fail open, they pass. Either
// way the new process admits once its recovery window is over and enforces
// its limit at once. The load keeps at most 3 requests out, below the limit
// of 4, so that the outage (fail open) cannot break the invariant.
// (TestHeartbeatDaemonRestartAdopts floods the restart instead.)
func TestFaultDaemonKilledAndRestarted(t *testing.T) {
	for _, tt := range []struct {
		name  string
		allow bool
	}{{"fail closed", false}, {"fail open", true}} {
		t.Run(tt.name, func(t *testing.T) {
			fs := startFaultStack(t, faultSpec{
				yaml: `
bulkheads:
  catalog: {max_concurrent: 4, max_queue: 4, max_wait: 200ms}
`,
				envoy: func(p *envoy.Params) { p.FailureModeAllow = tt.allow },
			})
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			up := fs.up["catalog"]
			up.SetDelay(20 * time.Millisecond)
			lctx, stopLoad := context.WithCancel(ctx)
			defer stopLoad()
			load, waitLoad := runLoad(t, lctx, testbed.LoadSpec{URL: fs.base + "/catalog", Rate: 20, Duration: 20 * time.Second,
				MaxRequests: 400, MaxOutstanding: 3, Timeout: 5 * time.Second})
			poll(t, ctx, "load admitted", func() bool { return load.Snapshot().OK() >= 10 })
			if w := load.TakeWindow(); w.OK() != w.Responses() || w.TransportErrors != 0 {
				t.Fatalf("before the kill: %+v", w)
			}

			fs.killDaemon()
			for i := range 5 {
				r := fs.get(ctx, "/catalog", nil)
				if r.err != nil {
					t.Fatalf("outage request %d: %v", i, r.err)
				}
				reason, retry := r.header.Get("x-bulkhead-reason"), r.header.Get("retry-after")
				switch {
				case tt.allow && r.status != http.StatusOK:
					t.Fatalf("fail open, outage request %d: %d %q, want 200", i, r.status, r.body)
				case !tt.allow && (r.status != envoy.DefaultStatusOnError || reason != "" || retry != ""):
					t.Fatalf("fail closed, outage request %d: %d reason %q retry-after %q, want Envoy's %d without Bulkhead's headers",
						i, r.status, reason, retry, envoy.DefaultStatusOnError)
				}
			}
			// Requests admitted by the dead process finish at the upstream
			// before the new one starts admitting: it cannot know them.
			if err := up.WaitIdle(ctx); err != nil {
				t.Fatal(err)
			}
			load.TakeWindow() // requests that straddled the kill
			var outage testbed.Stats
			poll(t, ctx, "the load's requests during the outage", func() bool {
				outage = testbed.MergeStats(outage, load.TakeWindow())
				return outage.Responses() >= 3
			})
			if tt.allow && outage.OK() != outage.Responses() ||
				!tt.allow && (outage.Count(envoy.DefaultStatusOnError) != outage.Responses() || outage.MalformedRejections != outage.Rejections) {
				t.Errorf("the load during the outage: %v (%d of %d rejections without Bulkhead's headers)",
					outage.ByStatus, outage.MalformedRejections, outage.Rejections)
			}

			restart := time.Now()
			fs.restartDaemon(ctx)
			fs.waitAdmitting(ctx)
			r := fs.get(ctx, "/catalog", nil)
			if r.status != http.StatusOK {
				t.Fatalf("first request after the restart: %d %v %q", r.status, r.err, r.body)
			}
			t.Logf("first request after the restart answered %v after it began; the load during the outage: %v",
				time.Since(restart).Round(time.Millisecond), outage.ByStatus)
			load.TakeWindow() // requests sent before the restart, answered after
			poll(t, ctx, "the new process admits the load", func() bool {
				return fs.counter("bulkhead_admitted_total", map[string]string{"dependency": "catalog"}) >= 5
			})
			stopLoad()
			if st := waitLoad(); st.TransportErrors != 0 {
				t.Errorf("the load saw %d transport errors", st.TransportErrors)
			}
			if after := load.TakeWindow(); after.OK() != after.Responses() {
				t.Errorf("after the restart: %v, want only 200s", after.ByStatus)
			}

			// The new process enforces its limit at once. First every
			// permit of the load is back: the end entries of requests it
			// admitted just after the restart can be lost while Envoy finds
			// its access-log streams to the dead process broken, and their
			// permits then come back by lease (leases.heartbeat_ttl). Seen
			// twice in make test: four requests found the limit held.
			freed := time.Now()
			fs.waitGauge("bulkhead_active_calls", "catalog", 0, 10*time.Second)
			t.Logf("every permit of the load back %v after it stopped", time.Since(freed).Round(time.Millisecond))
			up.Hold()
			var held []<-chan response
			for range 4 {
				held = append(held, fs.getAsync(ctx, "/catalog", nil))
			}
			if err := up.WaitInflight(ctx, 4); err != nil {
				// Seen once in make test (not in 38 runs since): say what
				// the four got and what the daemon held.
				var got []string
				for _, ch := range held {
					select {
					case r := <-ch:
						got = append(got, fmt.Sprintf("%d %q %v", r.status, r.header.Get("x-bulkhead-reason"), r.err))
					default:
						got = append(got, "no answer")
					}
				}
				m := fs.metrics()
				t.Fatalf("%v; the four requests: %v; daemon: %v active, %v queued, %v admitted since the restart", err, got,
					m.Sum("bulkhead_active_calls", nil), m.Sum("bulkhead_queued_calls", nil), m.Sum("bulkhead_admitted_total", nil))
			}
			if r := fs.get(ctx, "/catalog", nil); r.status != http.StatusServiceUnavailable || r.header.Get("x-bulkhead-reason") != "timeout" {
				t.Errorf("fifth request with four held: %d reason %q, want 503 timeout", r.status, r.header.Get("x-bulkhead-reason"))
			}
			up.ReleaseHeld()
			for _, ch := range held {
				if r := <-ch; r.status != http.StatusOK {
					t.Errorf("held request: %d %v", r.status, r.err)
				}
			}
		})
	}
}

// Issue 6, scenario 4: upstream 5xx, upstream timeouts (route timeout),
// client aborts and slow clients: every permit is released by its access
// log and each outcome is counted where it belongs.
func TestFaultOutcomesCounted(t *testing.T) {
	const routeTimeout = 300 * time.Millisecond
	fs := startFaultStack(t, faultSpec{
		yaml: `
bulkheads:
  catalog: {max_concurrent: 4}
  auth: {max_concurrent: 4}
  orders: {max_concurrent: 4}
`,
		envoy: func(p *envoy.Params) { p.Routes[2].Timeout = routeTimeout }, // orders
	})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	type outcomes struct{ success, failure, aborted, released float64 }
	read := func(dep string) outcomes {
		m := fs.metrics()
		l := map[string]string{"dependency": dep}
		return outcomes{m.Sum("bulkhead_success_total", l), m.Sum("bulkhead_failure_total", l),
			m.Sum("bulkhead_aborted_total", l), m.Sum("bulkhead_releases_total", map[string]string{"source": "access_log"})}
	}
	tests := []struct {
		name string
		dep  string
		run  func(t *testing.T)
		want outcomes // deltas
	}{
		{"upstream 5xx", "catalog", func(t *testing.T) {
			fs.up["catalog"].SetStatus(http.StatusInternalServerError)
			defer fs.up["catalog"].SetStatus(http.StatusOK)
			for range 3 {
				if r := fs.get(ctx, "/catalog", nil); r.status != http.StatusInternalServerError {
					t.Fatalf("status %d %v, want 500", r.status, r.err)
				}
			}
		}, outcomes{failure: 3, released: 3}},
		{"upstream timeout", "orders", func(t *testing.T) {
			fs.up["orders"].SetDelay(5 * time.Second)
			defer fs.up["orders"].SetDelay(0)
			for range 2 {
				start := time.Now()
				if r := fs.get(ctx, "/orders", nil); r.status != http.StatusGatewayTimeout {
					t.Fatalf("status %d %v, want 504", r.status, r.err)
				}
				if d := time.Since(start); d > routeTimeout+time.Second {
					t.Errorf("504 after %v, route timeout %v", d, routeTimeout)
				}
			}
		}, outcomes{failure: 2, released: 2}},
		{"client abort while the upstream works", "auth", func(t *testing.T) {
			up := fs.up["auth"]
			up.Hold()
			defer up.ReleaseHeld()
			rctx, rcancel := context.WithCancel(ctx)
			ch := fs.getAsync(rctx, "/auth", nil)
			if err := up.WaitInflight(ctx, 1); err != nil {
				t.Fatal(err)
			}
			rcancel()
			if r := <-ch; r.err == nil {
				t.Fatalf("aborted request got %d", r.status)
			}
		}, outcomes{aborted: 1, released: 1}},
		{"slow client upload", "auth", func(t *testing.T) {
			// The client trickles its body for ~600ms; the upstream answers
			// after 900ms. The permit is held all along, then released.
			fs.up["auth"].SetDelay(900 * time.Millisecond)
			defer fs.up["auth"].SetDelay(0)
			pr, pw := io.Pipe()
			go func() {
				tick := time.NewTicker(100 * time.Millisecond) // the client's pace, not synchronisation
				defer tick.Stop()
				for range 6 {
					<-tick.C
					if _, err := pw.Write([]byte("slow chunk\n")); err != nil {
						return
					}
				}
				pw.Close()
			}()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fs.base+"/auth", pr)
			done := make(chan response, 1)
			go func() {
				resp, err := client.Do(req)
				if err != nil {
					done <- response{err: err}
					return
				}
				defer resp.Body.Close()
				_, err = io.Copy(io.Discard, resp.Body)
				done <- response{status: resp.StatusCode, err: err}
			}()
			poll(t, ctx, "the slow request holding its permit", func() bool { return fs.gauge("bulkhead_active_calls", "auth") == 1 })
			if r := <-done; r.status != http.StatusOK || r.err != nil {
				t.Fatalf("slow request: %d %v", r.status, r.err)
			}
		}, outcomes{success: 1, released: 1}},
		{"success", "auth", func(t *testing.T) {
			for range 3 {
				if r := fs.get(ctx, "/auth", nil); r.status != http.StatusOK {
					t.Fatalf("status %d %v", r.status, r.err)
				}
			}
		}, outcomes{success: 3, released: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := read(tt.dep)
			tt.run(t)
			fs.waitGauge("bulkhead_active_calls", tt.dep, 0, 2*time.Second)
			want := tt.want
			want.success += before.success
			want.failure += before.failure
			want.aborted += before.aborted
			want.released += before.released
			wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
			defer wcancel()
			for read(tt.dep) != want && wctx.Err() == nil {
				time.Sleep(10 * time.Millisecond) // polling with a deadline
			}
			if got := read(tt.dep); got != want {
				t.Errorf("outcomes of %s (success, failure, aborted, access-log releases) = %+v, want %+v", tt.dep, got, want)
			}
		})
	}
	if got := fs.counter("bulkhead_releases_total", map[string]string{"source": "ttl"}); got != 0 {
		t.Errorf("%v permits were reclaimed by lease: every one should have been released by its access log", got)
	}
}
