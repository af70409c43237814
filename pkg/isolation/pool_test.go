package isolation_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestNewPoolInvalidSettings(t *testing.T) {
	if _, err := isolation.NewPool("x", bulkhead.Settings{}); !errors.Is(err, bulkhead.ErrInvalidSettings) {
		t.Fatalf("err = %v", err)
	}
}

func TestPoolStartsItsWorkers(t *testing.T) {
	p := mustPool(t, "dep", bulkhead.Settings{MaxConcurrent: 4, MaxQueue: 2})
	if st := p.Stats(); st.Workers != 4 || st.Idle != 4 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPolicies: what a rejected call becomes under each policy.
func TestPolicies(t *testing.T) {
	tests := []struct {
		policy     isolation.RejectionPolicy
		wantRan    bool
		wantErr    error
		callerRuns uint64
	}{
		{policy: isolation.Abort, wantErr: bulkhead.ErrQueueFull},
		{policy: isolation.CallerRuns, wantRan: true, callerRuns: 1},
	}
	for _, tt := range tests {
		t.Run(tt.policy.String(), func(t *testing.T) {
			p := mustPool(t, "dep", bulkhead.Settings{MaxConcurrent: 1}, isolation.WithPolicy(tt.policy))
			g := newGate()
			first := async(func() error { return p.Execute(context.Background(), bulkhead.Normal, g.wait) })
			g.awaitEntered(t, 1) // the only worker is busy: a call that runs now runs on the caller

			ran := false
			got, err := isolation.Do(context.Background(), p, func(context.Context) (string, error) {
				ran = true // no race: the caller's goroutine, or not at all
				return "ran", nil
			}, nil, bulkhead.Normal)
			if ran != tt.wantRan || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && (err != nil || got != "ran")) {
				t.Fatalf("ran %v, Do = %q, %v; want ran %v, err %v", ran, got, err, tt.wantRan, tt.wantErr)
			}
			if st := p.Stats(); st.CallerRuns != tt.callerRuns {
				t.Fatalf("CallerRuns = %d", st.CallerRuns)
			}
			g.Open()
			if err := recv(t, first); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCallerRunsNotAfterClose: a closed pool never runs a call.
func TestCallerRunsNotAfterClose(t *testing.T) {
	p := mustPool(t, "dep", bulkhead.Settings{MaxConcurrent: 1}, isolation.WithPolicy(isolation.CallerRuns))
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := p.Execute(context.Background(), bulkhead.Normal, func(context.Context) error {
		t.Error("ran after Close")
		return nil
	})
	if !errors.Is(err, bulkhead.ErrClosed) {
		t.Fatalf("err = %v", err)
	}
	if s := p.Snapshot(); s.Rejected[bulkhead.ReasonUnknownBulkhead] != 1 || !s.Closed {
		t.Fatalf("snapshot %+v", s)
	}
}

// TestCallTimeout: with a fake clock, the caller stops waiting when the
// call timeout passes, whether the call honours its context or not; a call
// still queued then is rejected with timeout.
func TestCallTimeout(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	p := mustPool(t, "dep", bulkhead.Settings{MaxConcurrent: 1, MaxQueue: 1},
		isolation.WithClock(clk), isolation.WithCallTimeout(time.Second))
	stubborn := newGate()
	var cause atomic.Value
	running := async(func() error {
		return p.Execute(context.Background(), bulkhead.Normal, func(ctx context.Context) error {
			err := stubborn.waitIgnoringCtx(ctx)
			cause.Store(context.Cause(ctx))
			return err
		})
	})
	stubborn.awaitEntered(t, 1)
	queued := async(func() error {
		return p.Execute(context.Background(), bulkhead.Normal, func(context.Context) error {
			t.Error("queued call ran")
			return nil
		})
	})
	// Timers: the running caller's, and the queued caller's limiter wait.
	testkit.Eventually(t, "both callers wait", func() bool { return clk.Timers() == 2 })
	clk.Advance(time.Second)
	if err := recv(t, running); !errors.Is(err, isolation.ErrCallTimeout) {
		t.Fatalf("running call: %v", err)
	}
	if err := recv(t, queued); !errors.Is(err, bulkhead.ErrTimeout) {
		t.Fatalf("queued call: %v", err)
	}
	// The stubborn call still holds its worker: the pool is honest about it.
	if st := p.Stats(); st.Snapshot.InUse != 1 || st.Abandoned != 1 {
		t.Fatalf("stats %+v", st)
	}
	stubborn.Open()
	testkit.Eventually(t, "the worker is back", func() bool { return p.Stats().Idle == 1 })
	if c, _ := cause.Load().(error); !errors.Is(c, isolation.ErrCallTimeout) {
		t.Fatalf("the call's context cause = %v", c)
	}
}

// TestCancelWhileRunning: the caller returns at once with its context's
// error; the call's context is cancelled; the worker comes back.
func TestCancelWhileRunning(t *testing.T) {
	p := mustPool(t, "dep", bulkhead.Settings{MaxConcurrent: 1})
	g := newGate()
	ctx, cancel := context.WithCancel(context.Background())
	res := async(func() error { return p.Execute(ctx, bulkhead.Normal, g.wait) })
	g.awaitEntered(t, 1)
	cancel()
	if err := recv(t, res); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	// A worker parks itself before it gives its permit back: wait for both.
	testkit.Eventually(t, "the worker is back and its permit released", func() bool {
		st := p.Stats()
		return st.Idle == 1 && st.Snapshot.InUse == 0
	})
	if st := p.Stats(); st.Snapshot.InUse != 0 || st.Workers != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPoolPriorities: the queue serves critical first, and a critical
// arrival sheds a queued best_effort call when the queue is full.
func TestPoolPriorities(t *testing.T) {
	p := mustPool(t, "dep", bulkhead.Settings{MaxConcurrent: 1, MaxQueue: 2})
	g := newGate()
	first := async(func() error { return p.Execute(context.Background(), bulkhead.Normal, g.wait) })
	g.awaitEntered(t, 1)

	var mu sync.Mutex
	var order []bulkhead.Priority
	record := func(prio bulkhead.Priority) func(context.Context) error {
		return func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, prio)
			return nil
		}
	}
	submit := func(prio bulkhead.Priority, queuedBefore int) <-chan error {
		ch := async(func() error { return p.Execute(context.Background(), prio, record(prio)) })
		testkit.Eventually(t, "queued", func() bool { return p.Snapshot().QueuedTotal() == queuedBefore+1 })
		return ch
	}
	be := submit(bulkhead.BestEffort, 0)
	normal := submit(bulkhead.Normal, 1)
	crit := async(func() error { return p.Execute(context.Background(), bulkhead.Critical, record(bulkhead.Critical)) })
	if err := recv(t, be); !errors.Is(err, bulkhead.ErrShed) {
		t.Fatalf("best_effort: %v", err)
	}
	g.Open()
	for _, ch := range []<-chan error{first, normal, crit} {
		if err := recv(t, ch); err != nil {
			t.Fatal(err)
		}
	}
	if len(order) != 2 || order[0] != bulkhead.Critical || order[1] != bulkhead.Normal {
		t.Fatalf("order %v", order)
	}
}

// TestPoolGoexit: a call that ends its goroutine (t.FailNow does) releases
// its permit; the pool replaces the worker.
func TestPoolGoexit(t *testing.T) {
	p := mustPool(t, "dep", bulkhead.Settings{MaxConcurrent: 1})
	err := p.Execute(context.Background(), bulkhead.Normal, func(context.Context) error {
		runtime.Goexit()
		return nil
	})
	if !errors.Is(err, isolation.ErrPanic) {
		t.Fatalf("err = %v", err)
	}
	if err := p.Execute(context.Background(), bulkhead.Normal, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("next call: %v", err)
	}
	if st := p.Stats(); st.Workers != 1 || st.Panics != 1 || st.Snapshot.InUse != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPoolBound: under a burst, running calls never exceed the limit, live
// workers never exceed it either, and every call is either run or rejected.
func TestPoolBound(t *testing.T) {
	const limit, callers, perCaller = 4, 16, 50
	p := mustPool(t, "dep", bulkhead.Settings{MaxConcurrent: limit, MaxQueue: 8})
	var running, peak, ran, rejected atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range perCaller {
				err := p.Execute(context.Background(), bulkhead.Normal, func(context.Context) error {
					n := running.Add(1)
					for {
						old := peak.Load()
						if n <= old || peak.CompareAndSwap(old, n) {
							break
						}
					}
					if w := p.Stats().Workers; w > limit {
						t.Errorf("%d workers", w)
					}
					runtime.Gosched()
					running.Add(-1)
					return nil
				})
				switch {
				case err == nil:
					ran.Add(1)
				case bulkhead.ReasonOf(err) == bulkhead.ReasonQueueFull:
					rejected.Add(1)
				default:
					t.Errorf("err = %v", err)
				}
			}
		})
	}
	wg.Wait()
	if peak.Load() > limit || ran.Load()+rejected.Load() != callers*perCaller || ran.Load() == 0 {
		t.Fatalf("peak %d ran %d rejected %d", peak.Load(), ran.Load(), rejected.Load())
	}
	s := p.Snapshot()
	if s.InUse != 0 || s.Admitted[bulkhead.Normal] != uint64(ran.Load()) || s.Released != s.Admitted[bulkhead.Normal] {
		t.Fatalf("snapshot %+v", s)
	}
}
