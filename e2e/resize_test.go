//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// ctl runs bulkheadctl against the daemon's admin listener.
func (s *stack) ctl(args ...string) (string, error) {
	s.t.Helper()
	cmd := exec.Command(bulkheadctlBin, append([]string{"--addr", s.adminAddr}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Issue 4: under load, `bulkheadctl set catalog --max-concurrent N` takes
// effect within 1 s, measured at the upstream (its concurrency follows the
// new limit down and up), with no restart and no request lost beyond the
// intended rejections.
func TestResizeUnderLoad(t *testing.T) {
	s := startStack(t, `
bulkheads:
  catalog: {max_concurrent: 10, max_queue: 200, max_wait: 3s}
`, func(p *envoy.Params) { p.ExtAuthzTimeout = 5 * time.Second })
	s.setLimit("catalog", 12)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	up := s.up["catalog"]
	up.SetDelay(100 * time.Millisecond)

	// Demand: 150 rps x 100 ms = 15 concurrent, above every limit used.
	load, err := testbed.NewLoad(testbed.LoadSpec{URL: s.base + "/catalog", Rate: 150, Duration: 9 * time.Second,
		MaxRequests: 1400, MaxOutstanding: 600, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan testbed.Stats, 1)
	go func() {
		st, _ := load.Run(ctx)
		done <- st
	}()

	// Sample the upstream's own concurrency.
	type sample struct {
		at time.Time
		n  int
	}
	var mu sync.Mutex
	var samples []sample
	sctx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sctx.Err() == nil {
			mu.Lock()
			samples = append(samples, sample{time.Now(), up.Inflight()})
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // sampling interval
		}
	}()
	// followed returns how long after from the upstream's concurrency
	// followed a new limit: for a shrink, when it fell to the limit and
	// stayed there (for 300 ms); for a growth, when it first reached it.
	// It never may go above the new limit.
	followed := func(from time.Time, want int, shrink bool) time.Duration {
		t.Helper()
		deadline := time.Now().Add(3 * time.Second)
		for {
			time.Sleep(50 * time.Millisecond) // let samples accumulate
			mu.Lock()
			var ss []sample
			for _, sm := range samples {
				if !sm.at.Before(from) {
					ss = append(ss, sm)
				}
			}
			mu.Unlock()
			var reached time.Time
			for _, sm := range ss {
				switch {
				case sm.n > want && shrink:
					reached = time.Time{} // still draining permits granted before the shrink
				case sm.n > want:
					t.Fatalf("upstream at %d, above the new limit %d", sm.n, want)
				case reached.IsZero() && (shrink || sm.n == want):
					reached = sm.at
				}
			}
			if !reached.IsZero() && (!shrink || ss[len(ss)-1].at.Sub(reached) >= 300*time.Millisecond) {
				return reached.Sub(from)
			}
			if time.Now().After(deadline) {
				t.Fatalf("upstream concurrency never followed the new limit %d", want)
			}
		}
	}

	if err := up.WaitInflight(ctx, 10); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		limit  int
		shrink bool
	}{{4, true}, {12, false}, {6, true}} {
		time.Sleep(time.Second) // hold each limit for a while under load
		at := time.Now()
		out, err := s.ctl("set", "catalog", "--max-concurrent", fmt.Sprint(step.limit))
		if err != nil {
			t.Fatalf("bulkheadctl set: %v\n%s", err, out)
		}
		lag := followed(at, step.limit, step.shrink)
		t.Logf("set max_concurrent %d: upstream followed in %v", step.limit, lag.Round(time.Millisecond))
		if lag > time.Second {
			t.Errorf("max_concurrent %d took effect at the upstream after %v, want within 1s", step.limit, lag)
		}
	}
	st := <-done
	stopSampling()
	wg.Wait()

	t.Logf("load: %d sent, %d ok, rejected %v, transport errors %d", st.Sent, st.OK(), st.ByReason, st.TransportErrors)
	if st.OK()+st.Rejections != st.Sent || st.TransportErrors != 0 || !st.RejectionsWellFormed() {
		t.Errorf("requests lost beyond the intended rejections: %d sent, %d ok, %d rejected (well-formed %v), %d transport errors, statuses %v",
			st.Sent, st.OK(), st.Rejections, st.RejectionsWellFormed(), st.TransportErrors, st.ByStatus)
	}
	out, err := s.ctl("get", "catalog", "-o", "json")
	if err != nil || !strings.Contains(out, `"max_concurrent"`) {
		t.Fatalf("bulkheadctl get: %v\n%s", err, out)
	}
}
