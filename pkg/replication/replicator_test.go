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
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/control"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// Run's one loop, on a fake clock: the first round at once (applying the
// overrides in force), the breakers every round, the sizing counts and the
// overrides every second, an override made here written at once. While
// the ledger finds Redis unavailable it writes nothing, drops the peers'
// windows, keeps an override made here for later, and logs the outage and
// the recovery once each. Run returns when its context ends, leaving
// Redis without this replica's breaker windows.
func TestRun(t *testing.T) {
	srv := testkit.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	fc := clock.NewFake(time.Now())
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var ledger ledgerState
	set := breaker.NewSet(fc)
	set.Apply(map[string]breaker.Settings{"catalog": {FailureRatio: 0.5, MinRequests: 5, Window: 10 * time.Second, OpenFor: time.Second, HalfOpenProbes: 1}})
	obs := sizing.New(fc)
	r := New(Store{Client: rdb, Prefix: "t:", Replica: "a"}, ledger.get, set, obs, WithLogger(log), WithClock(fc))

	// An override in force, written at another replica before this one
	// starts.
	other := newOverrideSync(rdb, "t:", slog.New(slog.DiscardHandler))
	other.sink("catalog", &control.Override{Settings: bulkhead.Settings{MaxConcurrent: 3}, Actor: "b", At: time.Now()})
	other.take(<-other.events)
	if err := other.flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Another replica's breaker window.
	peer := encodeShare(breaker.Share{Calls: 4}, time.Now())
	if err := rdb.HSet(ctx, "t:{catalog}:breaker", "b", peer).Err(); err != nil {
		t.Fatal(err)
	}

	app := &applied{}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx, app) }()
	// A round is over when Run has armed the timer of the next.
	waitRound := func() { t.Helper(); testkit.Eventually(t, "round over", func() bool { return fc.Timers() == 1 }) }
	round := func() { t.Helper(); fc.Advance(breakerSyncEvery); waitRound() }
	mine := func(key string) bool {
		t.Helper()
		ok, err := rdb.HExists(ctx, key, "a").Result()
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	breakerKey := "t:{catalog}:breaker"
	// The key of the requests that ended here this second.
	sizingKey := func() string { return (&sizingShare{store: Store{Prefix: "t:"}}).key("catalog", fc.Now().Unix()) }
	peerCalls := func() uint64 { return set.Get("catalog").Snapshot().PeerCalls }

	waitRound() // round 0
	if ov, ok := app.get("catalog"); !ok || ov == nil || ov.Settings.MaxConcurrent != 3 {
		t.Fatalf("override in force at start: %+v %v, want max_concurrent 3 applied", ov, ok)
	}
	if !mine(breakerKey) || peerCalls() != 4 {
		t.Fatalf("first round: own window written %v, peers' calls %d; want written, 4", mine(breakerKey), peerCalls())
	}

	// Cadences: the breakers every round, the sizing counts every fourth.
	obs.Ended("catalog", bulkhead.Success, 100*time.Millisecond)
	endedKey := sizingKey()
	for i := 1; i <= roundsPerSecond; i++ {
		if err := rdb.HDel(ctx, breakerKey, "a").Err(); err != nil {
			t.Fatal(err)
		}
		round()
		if !mine(breakerKey) {
			t.Fatalf("round %d: breaker window not written", i)
		}
		if got, want := mine(endedKey), i == roundsPerSecond; got != want {
			t.Fatalf("round %d: sizing counts written %v, want %v", i, got, want)
		}
	}

	// An override made here is written at once, between rounds.
	r.Override("catalog", &control.Override{Settings: bulkhead.Settings{MaxConcurrent: 4}, Actor: "a", At: time.Now()})
	testkit.Eventually(t, "override written", func() bool {
		v, err := rdb.HGet(ctx, "t:overrides", "catalog").Result()
		return err == nil && strings.Contains(v, `"actor":"a"`)
	})

	// The ledger finds Redis unavailable: nothing is written.
	ledger.set(admission.Unavailable)
	r.Override("catalog", &control.Override{Settings: bulkhead.Settings{MaxConcurrent: 5}, Actor: "later", At: time.Now()})
	testkit.Eventually(t, "override heard", func() bool { return len(r.overrides.events) == 0 })
	if err := rdb.HDel(ctx, breakerKey, "a").Err(); err != nil {
		t.Fatal(err)
	}
	obs.Ended("catalog", bulkhead.Success, 100*time.Millisecond)
	endedKey = sizingKey()
	for range 2 * roundsPerSecond {
		round()
		if mine(breakerKey) || mine(endedKey) {
			t.Fatal("written to Redis while the ledger finds it unavailable")
		}
	}
	if peerCalls() != 0 {
		t.Errorf("peers' window %d calls while unavailable, want dropped", peerCalls())
	}
	if v, _ := rdb.HGet(ctx, "t:overrides", "catalog").Result(); strings.Contains(v, "later") {
		t.Fatal("override made here written while the ledger finds Redis unavailable")
	}

	// Strict: Redis answers again; the override made meanwhile is
	// written within a second.
	ledger.set(admission.Strict)
	for range roundsPerSecond {
		round()
	}
	if v, _ := rdb.HGet(ctx, "t:overrides", "catalog").Result(); !strings.Contains(v, `"actor":"later"`) {
		t.Fatalf("override made while Redis was away: %q in Redis a second after it answers", v)
	}
	if !mine(breakerKey) || peerCalls() != 4 {
		t.Fatalf("after the outage: own window written %v, peers' calls %d; want written, 4", mine(breakerKey), peerCalls())
	}
	for what, msg := range map[string]string{
		"outage":   "not shared with the other replicas until the redis ledger answers",
		"recovery": "shared with the other replicas again",
	} {
		if n := strings.Count(logs.String(), msg); n != 1 {
			t.Errorf("the %s logged %d times, want once:\n%s", what, n, logs.String())
		}
	}

	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if mine(breakerKey) {
		t.Error("this replica's breaker window still in Redis after Run returned")
	}
	if strings.Contains(logs.String(), "level=WARN msg=\"not shared with the other replicas this round") {
		t.Errorf("a round trip failed:\n%s", logs.String())
	}
}
