package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/admission/admissiontest"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

func TestMemoryContract(t *testing.T) {
	admissiontest.Run(t, func(t *testing.T, bulkheads map[string]bulkhead.Settings) admissiontest.Backend {
		reg := bulkhead.NewRegistry()
		if _, err := reg.Apply(bulkheads); err != nil {
			t.Fatal(err)
		}
		leases := permit.NewMemory(clock.Real{}, permit.WithSweepInterval(20*time.Millisecond))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = leases.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done; leases.Close(permit.Shutdown) })
		return admissiontest.Backend{Ledger: admission.NewMemory(reg, leases, admissiontest.Heartbeat), Bulkheads: reg}
	})
}

// During the recovery window a Check whose deadline ends before the window
// does is answered at once (timeout), not held; one whose deadline is
// later waits for the window's end and is admitted.
func TestRecoveryWindowAnswersEarly(t *testing.T) {
	reg := bulkhead.NewRegistry()
	if _, err := reg.Apply(map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 2, MaxQueue: 4, MaxWait: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	clk := clock.NewFake(start)
	leases := permit.NewMemory(clk)
	var pauses []bool
	m := admission.NewMemory(reg, leases, admissiontest.Heartbeat, admission.WithClock(clk),
		admission.WithRecovery(time.Hour, func(p bool) { pauses = append(pauses, p); reg.SetPaused(p) }))
	// Its deadline is half an hour away, the window's end an hour: held,
	// it would wait until its context ends (5 s).
	req := admission.Request{Bulkhead: reg.Get("catalog"), Priority: bulkhead.Normal, Lease: time.Minute,
		Deadline: start.Add(30 * time.Minute)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m.Admit(ctx, req); bulkhead.ReasonOf(err) != bulkhead.ReasonTimeout {
		t.Fatalf("Admit with a deadline before the window's end = %v, want a timeout at once", err)
	}
	if s := reg.Get("catalog").Snapshot(); s.Queued[bulkhead.Normal] != 0 {
		t.Fatalf("the early answer queued: %+v", s)
	}
	// A Check that can outlast the window waits for it.
	req.Deadline = start.Add(2 * time.Hour)
	admitted := make(chan error, 1)
	go func() {
		_, err := m.Admit(context.Background(), req)
		admitted <- err
	}()
	recovered := make(chan bool, 1)
	go func() { recovered <- m.Recover(context.Background()) }()
	for reg.Get("catalog").Snapshot().Queued[bulkhead.Normal] != 1 {
		time.Sleep(time.Millisecond) // polling the limiter: the waiter queues on another goroutine
	}
	clk.Advance(time.Hour)
	if !<-recovered {
		t.Fatal("Recover reported the window not over")
	}
	if err := <-admitted; err != nil {
		t.Fatalf("the Check waiting for the window's end: %v", err)
	}
	if len(pauses) != 2 || !pauses[0] || pauses[1] {
		t.Fatalf("pauses %v, want [true false]", pauses)
	}
	// After the window, deadlines no longer matter to it.
	req.Deadline = clk.Now().Add(time.Millisecond)
	if a, err := m.Admit(context.Background(), req); err != nil || a.Token == "" {
		t.Fatalf("a Check after the window = %+v, %v; want admitted (a free permit)", a, err)
	}
}
