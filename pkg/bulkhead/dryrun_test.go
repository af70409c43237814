package bulkhead

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// call is one request of a trace: it arrives at at, of class prio, and
// keeps its permit for hold once granted.
type call struct {
	at   time.Duration
	prio Priority
	hold time.Duration
}

func randomTrace(r *rand.Rand) (Settings, []call) {
	s := Settings{MaxConcurrent: 1 + r.IntN(4), MaxQueue: r.IntN(4)}
	if r.IntN(2) == 0 {
		s.MaxWait = time.Duration(1+r.IntN(50)) * time.Millisecond
	}
	if r.IntN(3) == 0 {
		s.ReserveCritical = 0.25
	}
	if s.Validate() != nil {
		s.ReserveCritical = 0
	}
	calls := make([]call, 20+r.IntN(100))
	at := time.Duration(0)
	for i := range calls {
		at += time.Duration(1 + r.Int64N(int64(10*time.Millisecond)))
		calls[i] = call{at: at, prio: Priority(r.IntN(int(numPriorities))), hold: time.Duration(1 + r.Int64N(int64(40*time.Millisecond)))}
	}
	return s, calls
}

// event is one step of the enforcing reference run.
type event struct {
	at   time.Duration
	kind int // evEnd, evTimeout, evArrive: the order of events at one instant
	i    int // the call
}

const (
	evEnd = iota
	evTimeout
	evArrive
)

type events []event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].kind < h[j].kind
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// enforce runs the trace through an enforcing limiter, one event at a time
// on a fake clock (holds start at the grant), and returns its snapshot.
func enforce(t *testing.T, s Settings, calls []call) Snapshot {
	fc := clock.NewFake(epoch)
	l := mustNew(t, s, WithClock(fc))
	now := time.Duration(0)
	h := &events{}
	for i, c := range calls {
		heap.Push(h, event{at: c.at, kind: evArrive, i: i})
	}
	waiting := map[int]*waiter{}
	held := map[int]Permit{}
	granted := func(i int, p Permit) {
		held[i] = p
		heap.Push(h, event{at: now + calls[i].hold, kind: evEnd, i: i})
	}
	for h.Len() > 0 {
		ev := heap.Pop(h).(event)
		fc.Advance(ev.at - now)
		now = ev.at
		switch ev.kind {
		case evArrive:
			w, p, err := enqueue(l, calls[ev.i].prio)
			switch {
			case w != nil:
				waiting[ev.i] = w
				if s.MaxWait > 0 {
					heap.Push(h, event{at: now + s.MaxWait, kind: evTimeout, i: ev.i})
				}
			case err == nil:
				granted(ev.i, p)
			}
		case evTimeout:
			if w, ok := waiting[ev.i]; ok && !isDecided(w) {
				delete(waiting, ev.i)
				if _, err := l.abandon(w, ErrTimeout); err == nil {
					t.Fatalf("call %d: abandoned at its deadline, got a permit", ev.i)
				}
			}
		case evEnd:
			held[ev.i].Release()
			delete(held, ev.i)
		}
		for i, w := range waiting {
			if isDecided(w) {
				delete(waiting, i)
				if w.err == nil {
					granted(i, w.permit)
				}
			}
		}
	}
	return l.Snapshot()
}

// dryRun runs the trace through a dry-run limiter: every call is admitted
// at its arrival and ends hold later.
func dryRun(t *testing.T, s Settings, calls []call) Snapshot {
	fc := clock.NewFake(epoch)
	s.DryRun = true
	l := mustNew(t, s, WithClock(fc))
	now := time.Duration(0)
	h := &events{}
	for i, c := range calls {
		heap.Push(h, event{at: c.at, kind: evArrive, i: i})
	}
	held := map[int]Permit{}
	for h.Len() > 0 {
		ev := heap.Pop(h).(event)
		fc.Advance(ev.at - now)
		now = ev.at
		if ev.kind == evEnd {
			held[ev.i].Release()
			continue
		}
		p, err := l.Acquire(context.Background(), calls[ev.i].prio)
		if err != nil {
			t.Fatalf("dry run rejected call %d: %v", ev.i, err)
		}
		held[ev.i] = p
		heap.Push(h, event{at: now + calls[ev.i].hold, kind: evEnd, i: ev.i})
	}
	fc.Advance(time.Hour) // every virtual end and deadline is due
	return l.Snapshot()
}

// TestDryRunMatchesEnforcingTwin: on random traces, what a dry-run limiter
// would have rejected is, reason by reason, what the enforcing limiter
// rejected on the same trace.
func TestDryRunMatchesEnforcingTwin(t *testing.T) {
	n := 500
	if testing.Short() {
		n = 50
	}
	for seed := range uint64(n) {
		s, calls := randomTrace(rand.New(rand.NewPCG(seed, 7)))
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			want, got := enforce(t, s, calls), dryRun(t, s, calls)
			if got.WouldReject != want.Rejected {
				t.Fatalf("%+v: would reject %v, the enforcing limiter rejected %v", s, got.WouldReject, want.Rejected)
			}
			if got.Rejected != ([numReasons]uint64{}) || sum(got.Admitted) != uint64(len(calls)) {
				t.Fatalf("dry run rejected %v, admitted %v of %d", got.Rejected, got.Admitted, len(calls))
			}
			if got.InUse != 0 || got.WouldQueue != 0 {
				t.Fatalf("after the trace: in use %d, would queue %d", got.InUse, got.WouldQueue)
			}
		})
		if t.Failed() {
			return
		}
	}
}

func TestDryRunAdmitsPastTheLimit(t *testing.T) {
	fc := clock.NewFake(epoch)
	l := mustNew(t, Settings{MaxConcurrent: 1, MaxQueue: 1, MaxWait: time.Second, DryRun: true}, WithClock(fc))
	ctx := context.Background()
	var ps []Permit
	for range 3 {
		p, err := l.Acquire(ctx, Normal)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	s := l.Snapshot()
	if s.InUse != 3 || s.WouldQueue != 1 || s.WouldReject[ReasonQueueFull] != 1 {
		t.Fatalf("in use %d, would queue %d, would reject %v; want 3, 1, one queue_full", s.InUse, s.WouldQueue, s.WouldReject)
	}
	fc.Advance(time.Second) // the second call would have timed out
	if s = l.Snapshot(); s.WouldReject[ReasonTimeout] != 1 || s.WouldQueue != 0 {
		t.Fatalf("after max_wait: would reject %v, would queue %d", s.WouldReject, s.WouldQueue)
	}
	if _, err := l.AcquireBefore(ctx, Normal, fc.Now().Add(-time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if s = l.Snapshot(); s.WouldReject[ReasonTimeout] != 2 {
		t.Fatalf("a call past its deadline that would wait: would reject %v, want a second timeout", s.WouldReject)
	}
	for _, p := range ps {
		p.Release()
	}
}

// TestDryRunToggle: turning enforcement on keeps permits in use and
// enforces from then on; turning it off admits the waiters at once.
func TestDryRunToggle(t *testing.T) {
	fc := clock.NewFake(epoch)
	s := Settings{MaxConcurrent: 1, MaxQueue: 1, DryRun: true}
	l := mustNew(t, s, WithClock(fc))
	ctx := context.Background()
	p1, _ := l.Acquire(ctx, Normal)
	p2, _ := l.Acquire(ctx, Normal)
	s.DryRun = false
	if err := l.Resize(s); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(Normal); err == nil {
		t.Fatal("enforcing at 2 in use of 1 admitted a third call")
	}
	w, _, _ := enqueue(l, Normal)
	if w == nil {
		t.Fatal("want the call queued")
	}
	s.DryRun = true
	if err := l.Resize(s); err != nil {
		t.Fatal(err)
	}
	if !isDecided(w) || w.err != nil {
		t.Fatalf("a waiter was not admitted when the limiter turned dry-run: err %v", w.err)
	}
	for _, p := range []Permit{p1, p2, w.permit} {
		if !p.Release() {
			t.Fatal("release failed")
		}
	}
	if snap := l.Snapshot(); snap.InUse != 0 || snap.WouldQueue != 0 {
		t.Fatalf("in use %d, would queue %d after every release", snap.InUse, snap.WouldQueue)
	}
}
