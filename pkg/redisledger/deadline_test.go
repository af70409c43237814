package redisledger

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// A Check with next to no time left is that Check's timeout, wherever its
// deadline falls (before the script is sent, or while Redis runs it): a
// healthy Redis stays strict.
func TestCheckDeadlineOnHealthyRedisIsNoOutage(t *testing.T) {
	f := newFixture(t)
	l := f.alone(Config{Prefix: "test:", Replica: "a", Timeout: time.Second, Tick: time.Hour})
	s := settings(1000, 0, 0)
	cut := 0
	for left := 10 * time.Microsecond; left <= 300*time.Microsecond; left += 10 * time.Microsecond {
		r := req("orders", s, bulkhead.Normal)
		r.Deadline = time.Now().Add(left)
		_, err := l.Acquire(context.Background(), r)
		if l.State() != admission.Strict {
			t.Fatalf("deadline %v away (%v): state %v with Redis healthy", left, err, l.State())
		}
		if err != nil && !errors.Is(err, bulkhead.ErrTimeout) {
			t.Errorf("deadline %v away: %v, want a timeout", left, err)
		}
		if errors.Is(err, ErrCallerDeadline) {
			cut++
		}
	}
	if cut == 0 {
		t.Fatal("no call was cut by its deadline: the test shows nothing")
	}
	if got := f.rec.cutCalls(admission.OpAcquire); got != cut {
		t.Errorf("%d acquire calls counted as cut by the deadline, want %d", got, cut)
	}
	if f.rec.wentUnavailable() {
		t.Error("the ledger reported unavailable")
	}
}

// Only a call that had the ledger's whole timeout judges Redis: a slow
// Redis that a Check's shorter deadline cuts off is that Check's timeout,
// while a call that used the whole timeout, or an error before any
// deadline, makes the replica unavailable.
func TestOnlyTheWholeTimeoutJudgesRedis(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		deadline time.Duration // from the Acquire; 0: none
		fault    func(f *fixture)
		want     error
		state    admission.State
	}{
		{"slow Redis, the Check's deadline first", time.Second, 50 * time.Millisecond,
			func(f *fixture) { f.pause(300 * time.Millisecond) }, bulkhead.ErrTimeout, admission.Strict},
		{"slow Redis, the ledger's timeout first", 50 * time.Millisecond, time.Second,
			func(f *fixture) { f.pause(300 * time.Millisecond) }, ErrUnavailable, admission.Unavailable},
		{"slow Redis, no deadline", 50 * time.Millisecond, 0,
			func(f *fixture) { f.pause(300 * time.Millisecond) }, ErrUnavailable, admission.Unavailable},
		{"Redis killed, no deadline", 200 * time.Millisecond, 0,
			func(f *fixture) { f.redis.Kill() }, ErrUnavailable, admission.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			l := f.alone(Config{Prefix: "test:", Replica: "a", Timeout: tc.timeout, Tick: time.Hour})
			r := req("orders", settings(2, 0, 0), bulkhead.Normal)
			tc.fault(f)
			start := time.Now()
			if tc.deadline > 0 {
				r.Deadline = start.Add(tc.deadline)
			}
			_, err := l.Acquire(context.Background(), r)
			took := time.Since(start)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if l.State() != tc.state {
				t.Fatalf("state %v, want %v", l.State(), tc.state)
			}
			cut := f.rec.cutCalls(admission.OpAcquire)
			if tc.state == admission.Strict {
				if took >= 300*time.Millisecond {
					t.Errorf("the Check took %v: it waited for Redis past its deadline", took)
				}
				if cut != 1 {
					t.Errorf("%d acquire calls counted as cut by the deadline, want 1", cut)
				}
			} else if cut != 0 {
				t.Errorf("%d acquire calls counted as cut by the deadline, want 0 (Redis's failure)", cut)
			}
		})
	}
}

// A Redis that is gone cuts off every Check whose deadline comes before
// the ledger's timeout: each is that Check's timeout, and the next call with
// the whole timeout (the ticker's) finds Redis unavailable.
func TestKilledRedisIsFoundByTheWholeTimeout(t *testing.T) {
	f := newFixture(t)
	l := f.alone(Config{Prefix: "test:", Replica: "a", Timeout: 200 * time.Millisecond, Tick: time.Hour})
	f.redis.Kill()
	r := req("orders", settings(2, 0, 0), bulkhead.Normal)
	r.Deadline = time.Now().Add(50 * time.Millisecond)
	if _, err := l.Acquire(context.Background(), r); !errors.Is(err, bulkhead.ErrTimeout) {
		t.Fatalf("Check with 50ms left: %v, want a timeout", err)
	}
	if l.State() != admission.Strict {
		t.Fatalf("state %v after a Check's deadline", l.State())
	}
	l.tick(context.Background(), nil)
	if l.State() != admission.Unavailable {
		t.Fatalf("state %v after a tick with the whole timeout, want unavailable", l.State())
	}
	if _, err := l.Acquire(context.Background(), r); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Check while unavailable: %v", err)
	}
}

// A waiter whose bulkhead's recovery window ends looks at the bulkhead with
// its Check's context: a slow Redis then holds the look until the Check's
// deadline, which is that Check's end, not an outage.
func TestRecoveryLookCutByTheCheckIsNoOutage(t *testing.T) {
	f := newFixture(t)
	l := f.alone(Config{Prefix: "test:", Replica: "a", Timeout: 2 * time.Second, Recovery: 500 * time.Millisecond,
		Heartbeat: permit.Heartbeat{Interval: 500 * time.Millisecond, TTL: 500 * time.Millisecond}, Tick: time.Hour})
	// The Check's deadline comes after the window's end, and before Redis
	// answers again.
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, req("orders", settings(1, 1, 5*time.Second), bulkhead.Normal))
		done <- err
	}()
	f.queued("orders", 1) // in the new bulkhead's recovery window
	f.pause(time.Second)
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiter: %v, want its context's deadline", err)
	}
	if l.State() != admission.Strict || f.rec.wentUnavailable() {
		t.Fatalf("state %v (reported unavailable: %v) with Redis slow but answering",
			l.State(), f.rec.wentUnavailable())
	}
	if got := f.rec.cutCalls(admission.OpState); got != 1 {
		t.Fatalf("%d looks cut by the Check's deadline, want 1", got)
	}
}
