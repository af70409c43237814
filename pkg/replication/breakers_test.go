package replication

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// Two replicas on one Redis: each sees three of six failures, fewer than
// min_requests (5); shared, their windows open both breakers, one's
// closing closes the other's, and an operator's mode at one holds at both.
// A replica that stopped writing, and a field that does not parse, are
// left out.
func TestBreakerSyncMeshWide(t *testing.T) {
	srv := testkit.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	st := breaker.Settings{FailureRatio: 0.5, MinRequests: 5, Window: 10 * time.Second, OpenFor: time.Second, HalfOpenProbes: 1}
	fc := clock.NewFake(time.Now())
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	newReplica := func(id string) (*breaker.Set, *breakerSync) {
		set := breaker.NewSet(fc)
		set.Apply(map[string]breaker.Settings{"catalog": st})
		return set, &breakerSync{store: Store{Client: rdb, Prefix: "t:", Replica: id}, set: set, log: log}
	}
	sync := func(s *breakerSync) {
		t.Helper()
		if err := s.sync(ctx, time.Now(), breakerSyncEvery); err != nil {
			t.Fatal(err)
		}
	}
	setA, a := newReplica("a")
	setB, b := newReplica("b")
	for range 3 {
		setA.Record("catalog", true, time.Millisecond)
		setB.Record("catalog", true, time.Millisecond)
	}
	state := func(set *breaker.Set) breaker.State { return set.Get("catalog").Snapshot().State }
	if state(setA) != breaker.Closed || state(setB) != breaker.Closed {
		t.Fatal("a breaker opened on its own outcomes alone")
	}
	sync(a) // a writes its window; b's is not there yet
	if state(setA) != breaker.Closed {
		t.Fatal("a opened before b's window was shared")
	}
	sync(b) // b reads a's 3 failures: 6 of 6
	if state(setB) != breaker.Open {
		t.Fatalf("b %v with 6 failed of 6 across the replicas, want open", state(setB))
	}
	if s := setB.Get("catalog").Snapshot(); s.Transitions[breaker.Open] != 1 {
		t.Fatalf("b opened %d times", s.Transitions[breaker.Open])
	}
	sync(a) // a adopts b's opening
	if state(setA) != breaker.Open {
		t.Fatalf("a %v after b opened, want open", state(setA))
	}
	if ok, _ := setA.Allow("catalog"); ok {
		t.Fatal("a lets a request through with the mesh's breaker open")
	}

	// open_for later b lets its probe through, which succeeds: b closes,
	// and a follows.
	fc.Advance(time.Second)
	if ok, _ := setB.Allow("catalog"); !ok {
		t.Fatal("b refused its half-open probe")
	}
	setB.Record("catalog", false, time.Millisecond)
	if state(setB) != breaker.Closed {
		t.Fatalf("b %v after its probe succeeded, want closed", state(setB))
	}
	sync(b)
	sync(a)
	if state(setA) != breaker.Closed {
		t.Fatalf("a %v after b closed, want closed", state(setA))
	}

	// An operator's mode at one replica holds at the others, and so does
	// the return to auto.
	setB.Get("catalog").SetMode(breaker.ForceOpen)
	sync(b)
	sync(a)
	if s := setA.Get("catalog").Snapshot(); s.Mode != breaker.ForceOpen {
		t.Fatalf("a in mode %v after b's force_open, want force_open", s.Mode)
	}
	if ok, _ := setA.Allow("catalog"); ok {
		t.Fatal("a lets a request through under b's force_open")
	}
	fc.Advance(time.Millisecond)
	setA.Get("catalog").SetMode(breaker.Auto)
	sync(a)
	sync(b)
	if s := setB.Get("catalog").Snapshot(); s.Mode != breaker.Auto || s.State != breaker.Closed {
		t.Fatalf("b %v %v after a's return to auto, want auto, closed", s.Mode, s.State)
	}

	// A replica that stopped writing long ago, and a field that does not
	// parse, count for nothing.
	old := encodeShare(breaker.Share{Calls: 100, Failed: 100, Mode: breaker.ForceOpen, ModeAt: time.Now()}, time.Now().Add(-time.Minute))
	if err := rdb.HSet(ctx, "t:{catalog}:breaker", "gone", old, "broken", "1 2 x").Err(); err != nil {
		t.Fatal(err)
	}
	setC, c := newReplica("c")
	sync(c)
	if s := setC.Get("catalog").Snapshot(); s.PeerCalls != 0 || s.State != breaker.Closed || s.Mode != breaker.Auto {
		t.Errorf("c: peers' window %d calls, state %v, mode %v; want the live replicas' (empty, closed, auto)", s.PeerCalls, s.State, s.Mode)
	}
	if !strings.Contains(logs.String(), "circuit breaker share unreadable") || !strings.Contains(logs.String(), "replica=broken") {
		t.Errorf("the unreadable field is not logged:\n%s", logs.String())
	}

	// A graceful stop removes the replica's field.
	a.leave()
	if ok, err := rdb.HExists(ctx, "t:{catalog}:breaker", "a").Result(); err != nil || ok {
		t.Errorf("a's field after leave: %v %v", ok, err)
	}
}

// A Redis that does not answer is logged once, and each breaker then
// decides on its own outcomes: the peers' last windows no longer count,
// from the first round trip that fails (before the ledger notices) and
// while the ledger finds Redis unavailable.
func TestBreakerSyncRedisDown(t *testing.T) {
	srv := testkit.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	st := breaker.Settings{FailureRatio: 0.5, MinRequests: 3, Window: 10 * time.Second, OpenFor: time.Hour, HalfOpenProbes: 1}
	var ledger ledgerState
	newReplica := func(id string) (*breaker.Set, *Replicator) {
		set := breaker.NewSet(clock.Real{})
		set.Apply(map[string]breaker.Settings{"catalog": st})
		return set, New(Store{Client: rdb, Prefix: "t:", Replica: id}, ledger.get, set, sizing.New(clock.Real{}), WithLogger(log))
	}
	setA, a := newReplica("a")
	setB, b := newReplica("b")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	setB.Record("catalog", true, time.Millisecond)
	setB.Record("catalog", true, time.Millisecond)
	b.round(ctx, nopApplier{})
	a.round(ctx, nopApplier{})
	if s := setA.Get("catalog").Snapshot(); s.PeerCalls != 2 || s.State != breaker.Closed {
		t.Fatalf("a: peers' window %d calls, %v; want b's 2, closed", s.PeerCalls, s.State)
	}
	srv.Kill()
	a.round(ctx, nopApplier{}) // the ledger has not noticed: the round trip fails
	if s := setA.Get("catalog").Snapshot(); s.PeerCalls != 0 {
		t.Fatalf("a: peers' window %d calls after a round trip failed, want none", s.PeerCalls)
	}
	a.round(ctx, nopApplier{})
	ledger.set(admission.Unavailable)
	a.round(ctx, nopApplier{})
	a.round(ctx, nopApplier{})
	if n := strings.Count(logs.String(), "not shared with the other replicas until the redis ledger answers"); n != 1 {
		t.Errorf("the outage logged %d times, want once:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "not shared with the other replicas this round"); n != 1 {
		t.Errorf("the failed round trips logged %d times, want once:\n%s", n, logs.String())
	}
	setA.Record("catalog", true, time.Millisecond) // with b's last 2: 3 of 3
	if s := setA.Get("catalog").Snapshot(); s.State != breaker.Closed || s.PeerCalls != 0 {
		t.Fatalf("a %v, peers' window %d calls, without Redis; want closed on its own single failure", s.State, s.PeerCalls)
	}
	setA.Record("catalog", true, time.Millisecond)
	setA.Record("catalog", true, time.Millisecond)
	if st := setA.Get("catalog").Snapshot().State; st != breaker.Open {
		t.Errorf("breaker %v on its own 3 failures without Redis, want open", st)
	}
}
