package redisledger

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// fakeShares is package shares' Manager as a lease sees it.
type fakeShares struct {
	keep      atomic.Int64 // ns
	held, use atomic.Int64
}

func (f *fakeShares) Keep(string) time.Duration { return time.Duration(f.keep.Load()) }
func (f *fakeShares) LeaseUse(string) (int, int) {
	return int(f.held.Load()), int(f.use.Load())
}

// leaseFields reads replica's lease of catalog as Redis keeps it (epoch,
// seq, held, target, used as reported, want) and its end there less
// Redis's now.
func (f *fixture) leaseFields(prefix, replica string) (fields []string, left time.Duration, ok bool) {
	ctx := context.Background()
	v, err := f.rdb.HGet(ctx, Key(prefix, "catalog", "cl"), replica).Result()
	if err != nil {
		return nil, 0, false
	}
	end := int64(f.rdb.ZScore(ctx, Key(prefix, "catalog", "cx"), replica).Val())
	return strings.Split(v, "\n"), time.Duration(end-f.redisNow()) * time.Millisecond, true
}

// A lease that backs shares: it backs them (Backs) only once a call asked
// Redis to keep it the shares' keep after its end; its demand counts the
// permits held for shares as what their Envoys use (they are in use all the
// same); and when its
// replica stops, Redis keeps counting those permits for the keep, as long
// as an Envoy may still use them, where a lease with nothing in use goes
// back at once.
func TestCapacityBacksShares(t *testing.T) {
	f := newFixture(t)
	reg := capRegistry(t, bulkhead.Settings{MaxConcurrent: 20})
	sh := &fakeShares{}
	const keep = 2 * time.Second
	a := f.capacity(t, capSpec{id: "a", prefix: "shares:", reg: reg})
	testkit.Eventually(t, "a holds a lease", func() bool { return a.Local().Get("catalog") != nil && a.live(a.lease("catalog")) })
	if a.Backs("catalog", keep) {
		t.Fatal("a lease granted with no keep backs shares")
	}
	a.SetShares(sh)
	sh.keep.Store(int64(keep))
	testkit.Eventually(t, "the lease backs shares", func() bool { return a.Backs("catalog", keep) })
	if a.Backs("catalog", 2*keep) {
		t.Fatal("the lease backs shares for longer than it asked Redis to keep it")
	}
	if _, left, _ := f.leaseFields("shares:", "a"); left < keep {
		t.Fatalf("Redis ends the lease in %s, want after the keep (%s) at least", left, keep)
	}
	// A share of 8 for 1 request in flight, held from the lease.
	held := a.Local().Get("catalog").Hold(bulkhead.Normal, 8)
	if len(held) != 8 {
		t.Fatalf("held %d of the lease's %d, want 8", len(held), a.Local().Get("catalog").Settings().MaxConcurrent)
	}
	sh.held.Store(8)
	sh.use.Store(1)
	a.wake()
	var fs []string
	testkit.Eventually(t, "the lease's demand is the share's use, 1, not its 8 permits, which it counts in use", func() bool {
		var ok bool
		fs, _, ok = f.leaseFields("shares:", "a")
		return ok && fs[5] == "1" && fs[4] == "8" && atoi(fs[2]) >= 8
	})
	if !a.Far("catalog") {
		t.Fatal("one request in flight of 20: not far from the limit")
	}
	a.stop()
	fs, left, ok := f.leaseFields("shares:", "a")
	if !ok || fs[2] != "8" || fs[3] != "0" || left < keep {
		t.Fatalf("after the replica stopped: lease %v ending in %s, want 8 held (the share) for the keep (%s) at least", fs, left, keep)
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
