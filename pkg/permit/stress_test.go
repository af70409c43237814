package permit

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentEndsReleaseOnce races Release (several callers per token),
// Sweep and Renew over the same leases, then Close ends the rest, and checks
// that each permit was released exactly once and that the counts agree.
// Every fifth token is never released by token, so that Sweep and Close
// have leases of their own.
func TestConcurrentEndsReleaseOnce(t *testing.T) {
	const (
		leases    = 2000
		releasers = 4
		nodes     = 4
		sweeps    = 12
	)
	rec := newRecorder(0)
	l, clk := newFakeLedger(WithObserver(rec), WithShards(8), WithTombstones(leases))
	toks := make([]string, leases)
	permits := make([]*countingPermit, leases)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range toks {
		toks[i], permits[i] = grant(t, l, Grant{
			Bulkhead: "b",
			TTL:      time.Duration(1+rng.IntN(20)) * time.Second,
			Node:     fmt.Sprintf("envoy-%d", i%nodes),
		})
	}

	var released, duplicate, unknown, swept, renewed atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for r := range releasers {
		wg.Go(func() {
			order := rand.New(rand.NewPCG(uint64(r), 5)).Perm(leases)
			<-start
			for _, i := range order {
				if i%5 == 0 {
					continue
				}
				switch _, res := l.Release(toks[i], AccessLog); res {
				case Released:
					released.Add(1)
				case Duplicate, Expired:
					duplicate.Add(1)
				default:
					unknown.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		<-start
		for range sweeps {
			clk.Advance(time.Second)
			swept.Add(int64(l.Sweep()))
		}
	})
	for n := range nodes - 1 {
		// Heartbeats racing the ends: renewals move leases in the expiry
		// heap and never end one.
		wg.Go(func() {
			order := rand.New(rand.NewPCG(uint64(n), 7)).Perm(leases)
			<-start
			for _, i := range order {
				if _, res := l.Renew(toks[i], 2*time.Second); res == Renewed {
					renewed.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	closed := int64(l.Close(Shutdown))

	for i, p := range permits {
		if p.count() != 1 {
			t.Fatalf("permit %d released %d times", i, p.count())
		}
	}
	total := released.Load() + swept.Load() + closed
	if total != leases {
		t.Fatalf("ended %d leases (release %d, sweep %d, close %d), want %d",
			total, released.Load(), swept.Load(), closed, leases)
	}
	if got := len(rec.endings()); got != leases {
		t.Fatalf("observer saw %d ends, want %d", got, leases)
	}
	t.Logf("release %d, sweep %d, close %d, renewals %d", released.Load(), swept.Load(), closed, renewed.Load())
	if unknown.Load() != 0 {
		t.Fatalf("%d releases of issued tokens were unknown, want all duplicate", unknown.Load())
	}
	if d, want := duplicate.Load(), releasers*leases*4/5-released.Load(); d != want {
		t.Fatalf("%d duplicates, want %d", d, want)
	}
	if l.Len() != 0 {
		t.Fatalf("Len = %d after Close", l.Len())
	}
}

// TestConcurrentGrantClose checks that a Grant racing with Close either
// fails with ErrClosed or has its lease ended by Close.
func TestConcurrentGrantClose(t *testing.T) {
	l, _ := newFakeLedger(WithShards(4))
	const granters, each = 4, 200
	var granted atomic.Int64
	var permits [granters][each]countingPermit
	var wg sync.WaitGroup
	for g := range granters {
		wg.Go(func() {
			for i := range each {
				if _, err := l.Grant(&permits[g][i], Grant{Bulkhead: "b", TTL: time.Minute}); err == nil {
					granted.Add(1)
				}
			}
		})
	}
	closed := l.Close(Shutdown)
	wg.Wait()
	closed += l.Close(Shutdown)
	if int64(closed) != granted.Load() || l.Len() != 0 {
		t.Fatalf("Close ended %d, granted %d, Len %d", closed, granted.Load(), l.Len())
	}
	for g := range permits {
		for i := range permits[g] {
			if c := permits[g][i].count(); c > 1 {
				t.Fatalf("permit %d/%d released %d times", g, i, c)
			}
		}
	}
}
