package permit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestSweepExpires(t *testing.T) {
	rec := newRecorder(8)
	l, clk := newFakeLedger(WithObserver(rec))
	ttls := []time.Duration{time.Second, 2 * time.Second, 2 * time.Second, 5 * time.Second}
	toks := make([]string, len(ttls))
	permits := make([]*countingPermit, len(ttls))
	for i, ttl := range ttls {
		toks[i], permits[i] = grant(t, l, Grant{Bulkhead: "b", TTL: ttl})
	}
	steps := []struct {
		advance  time.Duration
		expired  int
		released []int // permits released after the step
	}{
		{999 * time.Millisecond, 0, []int{0, 0, 0, 0}},
		{time.Millisecond, 1, []int{1, 0, 0, 0}}, // Expires <= now
		{time.Second, 2, []int{1, 1, 1, 0}},
		{time.Second, 0, []int{1, 1, 1, 0}},
		{10 * time.Second, 1, []int{1, 1, 1, 1}},
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		if n := l.Sweep(); n != st.expired {
			t.Fatalf("step %d: Sweep = %d, want %d", i, n, st.expired)
		}
		for j, p := range permits {
			if p.count() != st.released[j] {
				t.Fatalf("step %d: permit %d released %d times, want %d", i, j, p.count(), st.released[j])
			}
		}
	}
	// An access log that arrives after expiry finds the lease expired.
	for _, tok := range toks {
		if _, r := l.Release(tok, AccessLog); r != Expired {
			t.Fatalf("late release: %v, want expired", r)
		}
	}
	for _, e := range rec.endings() {
		if e.src != TTL || e.at.Before(e.lease.Expires) {
			t.Fatalf("ended %+v: want source ttl at or after expiry", e)
		}
	}
}

// TestSweepManyBatches ends more leases than one batch holds, in one shard.
func TestSweepManyBatches(t *testing.T) {
	l, clk := newFakeLedger(WithShards(1))
	const n = 3*batchSize + 7
	permits := make([]*countingPermit, n)
	for i := range permits {
		_, permits[i] = grant(t, l, Grant{Bulkhead: "b", TTL: time.Duration(i+1) * time.Millisecond})
	}
	clk.Advance(time.Duration(n) * time.Millisecond)
	if got := l.Sweep(); got != n || l.Len() != 0 {
		t.Fatalf("Sweep = %d, Len = %d; want %d, 0", got, l.Len(), n)
	}
	for i, p := range permits {
		if p.count() != 1 {
			t.Fatalf("permit %d released %d times", i, p.count())
		}
	}
}

func TestRunSweepsOnClock(t *testing.T) {
	defer goleak.VerifyNone(t)
	rec := newRecorder(8)
	l, clk := newFakeLedger(WithObserver(rec), WithSweepInterval(500*time.Millisecond))
	tok, p := grant(t, l, Grant{Bulkhead: "b", TTL: time.Second})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = l.Run(ctx) })

	// Two ticks: the first (t0+0.5s) finds nothing expired, the second
	// (t0+1s) expires the lease.
	for tick := range 2 {
		testkit.Eventually(t, fmt.Sprintf("Run to arm timer %d", tick), func() bool { return clk.Timers() == 1 })
		clk.Advance(500 * time.Millisecond)
	}
	select {
	case got := <-rec.endedC:
		if got.Token != tok {
			t.Fatalf("ended %q, want %q", got.Token, tok)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not expire the lease")
	}
	if p.count() != 1 || l.Len() != 0 {
		t.Fatalf("permit released %d times, Len %d", p.count(), l.Len())
	}
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Fatalf("Run = %v, want nil", runErr)
	}
	if clk.Timers() != 0 {
		t.Fatalf("Run left %d timers armed", clk.Timers())
	}
}

// While HoldExpiries' function reports true, Sweep ends nothing; the
// leases past their expiry end at the first Sweep after.
func TestHoldExpiries(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	l := NewMemory(clk)
	var held atomic.Bool
	held.Store(true)
	l.HoldExpiries(held.Load)
	tok, err := l.Grant(&nopPermit{}, Grant{Bulkhead: "b", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	if n := l.Sweep(); n != 0 || l.Len() != 1 {
		t.Fatalf("Sweep while held ended %d, %d live; want 0 and 1", n, l.Len())
	}
	if _, res := l.Renew(tok, time.Second); res != Renewed {
		t.Fatalf("renewal of a lease past its expiry while held = %v, want renewed", res)
	}
	clk.Advance(2 * time.Second)
	held.Store(false)
	if n := l.Sweep(); n != 1 || l.Len() != 0 {
		t.Fatalf("Sweep after the hold ended %d, %d live; want 1 and 0", n, l.Len())
	}
}
