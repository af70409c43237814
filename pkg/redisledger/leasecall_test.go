package redisledger

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// manyRegistry is a registry of n bulkheads named b000, b001... with
// settings s.
func manyRegistry(t *testing.T, n int, s bulkhead.Settings) *bulkhead.Registry {
	t.Helper()
	want := map[string]bulkhead.Settings{}
	for i := range n {
		want[fmt.Sprintf("b%03d", i)] = s
	}
	reg := bulkhead.NewRegistry()
	if _, err := reg.Apply(want); err != nil {
		t.Fatal(err)
	}
	return reg
}

// roundCapacity is a capacity-lease backend whose lease loop does not run:
// the test calls its rounds (round) itself, on a ledger one tick made
// strict (calls of at most timeout). Each round renews every lease, steady
// or not (steady has tests of its own).
func (f *fixture) roundCapacity(timeout time.Duration) *Capacity {
	f.t.Helper()
	l := f.alone(Config{Prefix: "test:", Replica: "a", Timeout: timeout, Heartbeat: capHeartbeat, Tick: time.Second})
	return newRoundCapacity(f.t, l)
}

func newRoundCapacity(t testing.TB, l *Ledger) *Capacity {
	leases := permit.NewMemory(clock.Real{})
	t.Cleanup(func() { leases.Close(permit.Shutdown) })
	c := NewCapacity(l, NewFallback(l, admission.FailClosed, nopFallbackRecorder{}), leases)
	c.eachRound = true
	return c
}

// leaseCalls returns the lease calls recorded, and how many failed.
func (r *fakeRec) leaseCalls() (calls, errs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[admission.OpLease], r.errs[admission.OpLease]
}

// redisScripts is how many scripts Redis has run (INFO commandstats).
func (f *fixture) redisScripts() int64 {
	f.t.Helper()
	text, err := f.rdb.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		f.t.Fatal(err)
	}
	i, err := redisproc.ParseInfo(text)
	if err != nil {
		f.t.Fatal(err)
	}
	return i.Scripts()
}

// A round renews every bulkhead's lease in one call per leaseBatch
// bulkheads, as Redis counts them (and the recorder with it), not one per
// bulkhead: one call for 40 bulkheads, two for 100.
func TestCapacityRoundCallsPerBatch(t *testing.T) {
	for _, n := range []int{1, 40, leaseBatch, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFixture(t)
			c := f.roundCapacity(time.Second)
			reg := manyRegistry(t, n, bulkhead.Settings{MaxConcurrent: 10})
			ctx := context.Background()
			c.round(ctx, reg) // grants, and loads the script
			want := (n + leaseBatch - 1) / leaseBatch
			for range 3 {
				calls, _ := f.rec.leaseCalls()
				scripts := f.redisScripts()
				c.round(ctx, reg)
				if got, _ := f.rec.leaseCalls(); got-calls != want {
					t.Fatalf("%d bulkheads: %d lease calls counted in a round, want %d", n, got-calls, want)
				}
				if got := f.redisScripts() - scripts; got != int64(want) {
					t.Fatalf("%d bulkheads: Redis ran %d scripts in a round, want %d", n, got, want)
				}
			}
			for _, name := range reg.Keys() {
				if ls := c.lease(name); ls.target.Load() == 0 || !c.live(ls) || ls.seq != 4 {
					t.Fatalf("%s: target %d, live %v, seq %d after 4 rounds", name, ls.target.Load(), c.live(ls), ls.seq)
				}
			}
		})
	}
}

// On a Redis Cluster a bulkhead's keys live in its own slot, so a round
// sends one call per bulkhead, all in one pipeline (the client sends each
// node its own): every lease is granted and renewed, each call counted.
func TestCapacityRoundOnCluster(t *testing.T) {
	t.Parallel()
	nodes := testkit.StartRedisCluster(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: nodes[:1], IsClusterMode: true,
		ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	rec := newFakeRec()
	l := New(rdb, Config{Prefix: "test:", Replica: "a", Timeout: time.Second, Heartbeat: capHeartbeat, Tick: time.Second},
		&fakeObs{}, rec, nil)
	testkit.Eventually(t, "strict on the cluster", func() bool { l.tick(context.Background(), nil); return l.State() == admission.Strict })
	c := newRoundCapacity(t, l)
	const n = 12
	reg := manyRegistry(t, n, bulkhead.Settings{MaxConcurrent: 10})
	ctx := context.Background()
	for round := 1; round <= 3; round++ {
		before, _ := rec.leaseCalls()
		c.round(ctx, reg)
		if calls, errs := rec.leaseCalls(); calls-before != n || errs != 0 {
			t.Fatalf("round %d: %d lease calls (%d failed), want %d", round, calls-before, errs, n)
		}
		for _, name := range reg.Keys() {
			ls := c.lease(name)
			if ls.target.Load() == 0 || !c.live(ls) || ls.seq != int64(round) {
				t.Fatalf("round %d, %s: target %d, live %v, seq %d", round, name, ls.target.Load(), c.live(ls), ls.seq)
			}
			if v, err := rdb.HGet(ctx, Key("test:", name, "s"), "leased").Int(); err != nil || v != int(ls.held.Load()) {
				t.Fatalf("round %d, %s: Redis counts %d leased (%v), the replica holds %d", round, name, v, err, ls.held.Load())
			}
		}
	}
}

// A Redis that lost its scripts (restarted, failed over: SCRIPT FLUSH
// here) answers NOSCRIPT to each call of a round of several calls: the
// script is loaded and the calls run again, with no error and no lease
// lost.
func TestCapacityRoundReloadsScript(t *testing.T) {
	f := newFixture(t)
	c := f.roundCapacity(time.Second)
	reg := manyRegistry(t, leaseBatch+10, bulkhead.Settings{MaxConcurrent: 10})
	ctx := context.Background()
	c.round(ctx, reg)
	if err := f.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c.round(ctx, reg)
	if calls, errs := f.rec.leaseCalls(); calls != 4 || errs != 0 {
		t.Fatalf("two rounds of two calls, the scripts flushed between: %d calls, %d failed; want 4, 0", calls, errs)
	}
	for _, name := range reg.Keys() {
		if ls := c.lease(name); ls.seq != 2 || ls.target.Load() == 0 || !c.live(ls) {
			t.Fatalf("%s after the scripts were flushed: seq %d, target %d, live %v", name, ls.seq, ls.target.Load(), c.live(ls))
		}
	}
}

// A round whose call fails changes no lease here: each stands until its
// end by this replica's clock, and its demand (the overflow) goes with the
// next call, which renews every lease.
func TestCapacityRoundFailedCallLeasesStand(t *testing.T) {
	f := newFixture(t)
	c := f.roundCapacity(100 * time.Millisecond)
	reg := manyRegistry(t, 3, bulkhead.Settings{MaxConcurrent: 10})
	ctx := context.Background()
	c.round(ctx, reg)
	ends := map[string]int64{}
	for i, name := range reg.Keys() {
		ls := c.lease(name)
		ends[name] = ls.end.Load()
		ls.overflow.Store(int64(i + 1))
	}
	f.pause(500 * time.Millisecond)
	before, _ := f.rec.leaseCalls()
	c.round(ctx, reg)
	if calls, errs := f.rec.leaseCalls(); calls-before != 1 || errs != 1 {
		t.Fatalf("a failed round: %d calls, %d errors; want 1 and 1", calls-before, errs)
	}
	for i, name := range reg.Keys() {
		ls := c.lease(name)
		if ls.end.Load() != ends[name] || ls.overflow.Load() != int64(i+1) {
			t.Fatalf("%s after a failed call: end %d -> %d, overflow %d, want it unchanged (%d)", name, ends[name], ls.end.Load(),
				ls.overflow.Load(), i+1)
		}
	}
	testkit.Eventually(t, "Redis answers again", func() bool { return f.rdb.Ping(ctx).Err() == nil })
	c.round(ctx, reg)
	for _, name := range reg.Keys() {
		ls := c.lease(name)
		if ls.end.Load() <= ends[name] || ls.overflow.Load() != 0 {
			t.Fatalf("%s after the next call: end %d -> %d, overflow %d; want renewed, the demand sent", name, ends[name], ls.end.Load(),
				ls.overflow.Load())
		}
	}
}

// One bulkhead whose answer fails (a command failed for it in Redis) or is
// malformed loses only its own: the other bulkheads of the call are
// renewed, and its lease stands, its demand kept for the next call.
func TestCapacityRoundOneBulkheadBad(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(f *fixture, c *Capacity)
	}{
		{"failed", func(f *fixture, _ *Capacity) {
			// b001's lease key of the wrong type: its commands fail.
			ctx := context.Background()
			f.rdb.Del(ctx, Key("test:", "b001", "cl"))
			if err := f.rdb.Set(ctx, Key("test:", "b001", "cl"), "not a hash", 0).Err(); err != nil {
				f.t.Fatal(err)
			}
		}},
		{"malformed", func(_ *fixture, c *Capacity) {
			// b001's answer replaced by a string.
			text := common() + "\n" + strings.Replace(read("lease.lua"), "answers[i] = res", "answers[i] = i == 2 and 'garbage' or res", 1)
			c.ledger.sc.lease = redis.NewScript(text)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			c := f.roundCapacity(time.Second)
			reg := manyRegistry(t, 3, bulkhead.Settings{MaxConcurrent: 10})
			ctx := context.Background()
			c.round(ctx, reg)
			ends := map[string]int64{}
			for _, name := range reg.Keys() {
				ends[name] = c.lease(name).end.Load()
			}
			tc.spoil(f, c)
			c.lease("b001").overflow.Store(5)
			c.round(ctx, reg)
			for _, name := range reg.Keys() {
				ls := c.lease(name)
				renewed := ls.end.Load() > ends[name]
				if name == "b001" {
					if renewed || ls.overflow.Load() != 5 || !c.live(ls) {
						t.Fatalf("b001, its answer bad: renewed %v, overflow %d, live %v; want it standing, its demand kept",
							renewed, ls.overflow.Load(), c.live(ls))
					}
					continue
				}
				if !renewed {
					t.Fatalf("%s beside a bad answer: not renewed", name)
				}
			}
		})
	}
}

// common is the text every per-bulkhead script starts with (loadScripts).
func common() string {
	return fmt.Sprintf("local GRACE = %d\n", expiryGrace.Milliseconds()) + read("common.lua")
}

// Two replicas with capacity leases of more bulkheads than one lease call
// takes (two calls a round) admit concurrently, from their leases and per
// request: per bulkhead, the permits in use never exceed its limit.
func TestCapacityStrictManyBulkheads(t *testing.T) {
	f := newFixture(t)
	const n, limit = leaseBatch + 6, 2
	s := bulkhead.Settings{MaxConcurrent: limit, MaxQueue: 4, MaxWait: 20 * time.Millisecond}
	var regs [2]*bulkhead.Registry
	var reps [2]capReplica
	for i, id := range []string{"a", "b"} {
		regs[i] = manyRegistry(t, n, s)
		reps[i] = f.capacity(t, capSpec{id: id, prefix: "many:", reg: regs[i], tick: 50 * time.Millisecond})
	}
	names := regs[0].Keys()
	var inUse [n]atomic.Int64
	var over, admitted atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(1500 * time.Millisecond)
	// work admits, holds and releases permits of bulkhead next() until the
	// deadline, at replica r.
	work := func(r capReplica, reg *bulkhead.Registry, next func() int) {
		for time.Now().Before(deadline) {
			b := next()
			a, err := r.Admit(context.Background(), admission.Request{Bulkhead: reg.Get(names[b]), Priority: bulkhead.Normal,
				Lease: 10 * time.Second, Node: "envoy-1"})
			if err != nil {
				if bulkhead.ReasonOf(err) == bulkhead.ReasonNone {
					t.Errorf("admit: %v", err)
					return
				}
				continue
			}
			if inUse[b].Add(1) > limit {
				over.Add(1)
			}
			admitted.Add(1)
			time.Sleep(200 * time.Microsecond) // the request's own work, not a synchronisation
			inUse[b].Add(-1)
			ch := make(chan permit.Result, 1)
			r.Release(admission.Entry{Bulkhead: []byte(names[b]), Token: a.Token}, admission.DoneFunc(func(_ permit.Lease, res permit.Result) { ch <- res }))
			if res := <-ch; res != permit.Released {
				t.Errorf("release = %v", res)
				return
			}
		}
	}
	// Four hot bulkheads, two in each call of a round, at their limit
	// (four Checks at a time each, over both replicas); every bulkhead
	// with a little traffic (its lease is renewed, not parked).
	for w, b := range []int{0, 1, n - 2, n - 1, 0, 1, n - 2, n - 1, 0, 1, n - 2, n - 1, 0, 1, n - 2, n - 1} {
		wg.Go(func() { work(reps[w%2], regs[w%2], func() int { return b }) })
	}
	for w := range 4 {
		i := w
		wg.Go(func() { work(reps[w%2], regs[w%2], func() int { i = (i + 1) % n; return i }) })
	}
	wg.Wait()
	if o := over.Load(); o > 0 {
		t.Fatalf("%d admissions past a bulkhead's limit of %d", o, limit)
	}
	if admitted.Load() == 0 {
		t.Fatal("nothing admitted")
	}
	t.Logf("%d admitted over %d bulkheads, 2 replicas", admitted.Load(), n)
	for _, name := range names {
		testkit.Eventually(t, "per-request permits back", func() bool {
			v, _ := f.rdb.HGet(context.Background(), Key("many:", name, "s"), "inuse").Int()
			return v == 0
		})
	}
}
