package redisledger

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestLimitHoldsAndReleaseIsExactlyOnce(t *testing.T) {
	f := newFixture(t)
	a := f.replica("a", "orders")
	b := f.replica("b", "orders")
	s := settings(3, 0, 0)
	var tokens []string
	for i, l := range []*Ledger{a, b, a} {
		tok, err := l.Acquire(context.Background(), req("orders", s, bulkhead.Normal))
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		tokens = append(tokens, tok)
	}
	if _, err := b.Acquire(context.Background(), req("orders", s, bulkhead.Critical)); !errors.Is(err, bulkhead.ErrQueueFull) {
		t.Fatalf("fourth acquire across replicas: err %v, want queue_full", err)
	}
	// A release reaches the ledger from any replica, once.
	if _, res := b.ReleaseToken("orders", tokens[0], permit.AccessLog); res != permit.Released {
		t.Fatalf("release: %v", res)
	}
	if _, res := a.ReleaseToken("orders", tokens[0], permit.AccessLog); res != permit.Duplicate {
		t.Fatalf("second release: %v, want duplicate", res)
	}
	if _, res := a.ReleaseToken("orders", "AAAAAAAAAAAAAAAAAAAAAA", permit.AccessLog); res != permit.Unknown {
		t.Fatalf("unknown token: %v", res)
	}
	if _, res := a.ReleaseToken("orders", "not a token", permit.AccessLog); res != permit.Unknown {
		t.Fatalf("malformed token: %v", res)
	}
	if got := f.inUse("orders"); got != 2 {
		t.Fatalf("in use %d, want 2", got)
	}
}

func TestWaiterOnOneReplicaIsWokenByReleaseOnAnother(t *testing.T) {
	f := newFixture(t)
	a := f.replica("a", "orders")
	b := f.replica("b", "orders")
	s := settings(1, 4, 5*time.Second)
	tok, err := a.Acquire(context.Background(), req("orders", s, bulkhead.Normal))
	if err != nil {
		t.Fatal(err)
	}
	w := acquireAsync(b, req("orders", s, bulkhead.Normal))
	f.queued("orders", 1)
	start := time.Now()
	if _, res := a.ReleaseToken("orders", tok, permit.AccessLog); res != permit.Released {
		t.Fatalf("release: %v", res)
	}
	r := <-w
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	t.Logf("waiter granted %v after the release", time.Since(start))
	if got := f.inUse("orders"); got != 1 {
		t.Fatalf("in use %d, want 1 (handed over)", got)
	}
}

func TestGlobalPriorityAndShedding(t *testing.T) {
	f := newFixture(t)
	a := f.replica("a", "orders")
	b := f.replica("b", "orders")
	s := settings(1, 2, 5*time.Second)
	held, err := a.Acquire(context.Background(), req("orders", s, bulkhead.Critical))
	if err != nil {
		t.Fatal(err)
	}
	be := acquireAsync(a, req("orders", s, bulkhead.BestEffort))
	f.queued("orders", 1)
	normal := acquireAsync(a, req("orders", s, bulkhead.Normal))
	f.queued("orders", 2)
	// Queue full: a critical arrival at the other replica sheds the
	// youngest waiter of the lowest class (best_effort), wherever it waits.
	crit := acquireAsync(b, req("orders", s, bulkhead.Critical))
	if r := <-be; !errors.Is(r.err, bulkhead.ErrShed) {
		t.Fatalf("best_effort waiter: %v, want shed", r.err)
	}
	f.queued("orders", 2)
	// The next free permit goes to the critical waiter at b before the
	// normal one that waited longer at a.
	if _, res := b.ReleaseToken("orders", held, permit.AccessLog); res != permit.Released {
		t.Fatalf("release: %v", res)
	}
	rc := <-crit
	if rc.err != nil {
		t.Fatalf("critical: %v", rc.err)
	}
	select {
	case r := <-normal:
		t.Fatalf("normal waiter decided before the critical one released: %+v", r)
	default:
	}
	a.ReleaseToken("orders", rc.token, permit.AccessLog)
	if r := <-normal; r.err != nil {
		t.Fatalf("normal: %v", r.err)
	}
}

func TestReserveCeilings(t *testing.T) {
	f := newFixture(t)
	a := f.replica("a", "orders")
	s := bulkhead.Settings{MaxConcurrent: 10, ReserveCritical: 0.2, ReserveNormal: 0.3}
	admitted := func(p bulkhead.Priority) int {
		n := 0
		for range 20 {
			if _, err := a.Acquire(context.Background(), req("orders", s, p)); err == nil {
				n++
			}
		}
		return n
	}
	if got := admitted(bulkhead.BestEffort); got != 5 {
		t.Fatalf("best_effort admitted %d, want 5", got)
	}
	if got := admitted(bulkhead.Normal); got != 3 {
		t.Fatalf("normal admitted %d more, want 3", got)
	}
	if got := admitted(bulkhead.Critical); got != 2 {
		t.Fatalf("critical admitted %d more, want 2", got)
	}
}

func TestWaitTimesOutAndLeavesTheQueue(t *testing.T) {
	f := newFixture(t)
	a := f.replica("a", "orders")
	s := settings(1, 1, 100*time.Millisecond)
	if _, err := a.Acquire(context.Background(), req("orders", s, bulkhead.Normal)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(context.Background(), req("orders", s, bulkhead.Normal)); !errors.Is(err, bulkhead.ErrTimeout) {
		t.Fatalf("err %v, want timeout", err)
	}
	f.queued("orders", 0)
	// A cancelled waiter leaves at once too.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := a.Acquire(ctx, req("orders", settings(1, 1, 5*time.Second), bulkhead.Normal))
		done <- err
	}()
	f.queued("orders", 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	f.queued("orders", 0)
}

func TestLeaseExpiresOnRedisClockAndRenewKeepsIt(t *testing.T) {
	f := newFixture(t)
	a := f.replica("a", "orders")
	s := settings(2, 0, 0)
	r := req("orders", s, bulkhead.Normal)
	r.TTL = 300 * time.Millisecond
	short, err := a.Acquire(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := a.Acquire(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(900 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, res := a.RenewToken("orders", kept, 300*time.Millisecond, "node-a"); res != permit.Renewed {
			t.Fatalf("renew: %v", res)
		}
		time.Sleep(50 * time.Millisecond) // the heartbeat's own period
	}
	testkit.Eventually(t, "expired lease reclaimed", func() bool { return f.obs.count(permit.TTL) == 1 })
	if got := f.inUse("orders"); got != 1 {
		t.Fatalf("in use %d, want 1 (the renewed lease)", got)
	}
	// The expired one's end entry is told apart, and a late periodic entry
	// after it adopts nothing.
	if _, res := a.ReleaseToken("orders", short, permit.AccessLog); res != permit.Expired {
		t.Fatalf("release of the expired lease: %v", res)
	}
	if _, res := a.RenewToken("orders", short, time.Second, "node-a"); res != permit.Late {
		t.Fatalf("periodic entry after the end: %v, want late", res)
	}
}

func TestRedisLosingItsDataIsRebuiltFromHeartbeats(t *testing.T) {
	f := newFixture(t)
	l := New(f.rdb, Config{Prefix: "test:", Replica: "a", Timeout: time.Second, Recovery: 300 * time.Millisecond,
		Heartbeat: permit.Heartbeat{Interval: time.Second, TTL: time.Second}, Tick: 100 * time.Millisecond}, f.obs, f.rec, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx, func() []string { return []string{"orders"} }) }()
	t.Cleanup(func() { cancel(); <-done })
	testkit.Eventually(t, "strict", func() bool { return l.State() == admission.Strict })
	s := settings(2, 4, 2*time.Second)
	// Wait out the first recovery window of a fresh bulkhead.
	tokA, err := l.Acquire(context.Background(), req("orders", s, bulkhead.Normal))
	if err != nil {
		t.Fatal(err)
	}
	tokB, err := l.Acquire(context.Background(), req("orders", s, bulkhead.Normal))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	// The running requests' periodic entries adopt their permits; a new
	// arrival waits for the recovery window and then finds the bulkhead full.
	for _, tok := range []string{tokA, tokB} {
		if _, res := l.RenewToken("orders", tok, 5*time.Second, "node-a"); res != permit.Adopted {
			t.Fatalf("renew after the loss: %v, want adopted", res)
		}
	}
	if got := f.inUse("orders"); got != 2 {
		t.Fatalf("in use %d after adoption, want 2", got)
	}
	short := s
	short.MaxWait = time.Second
	if _, err := l.Acquire(context.Background(), req("orders", short, bulkhead.Normal)); !errors.Is(err, bulkhead.ErrTimeout) {
		t.Fatalf("arrival after rebuild: %v, want timeout (full)", err)
	}
	l.ReleaseToken("orders", tokA, permit.AccessLog)
	if _, err := l.Acquire(context.Background(), req("orders", short, bulkhead.Normal)); err != nil {
		t.Fatalf("arrival after a release: %v", err)
	}
}

func TestUnavailableAndBack(t *testing.T) {
	f := newFixture(t)
	a := f.replica("a", "orders")
	s := settings(2, 0, 0)
	f.redis.Kill()
	_, err := a.Acquire(context.Background(), req("orders", s, bulkhead.Normal))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("acquire with Redis down: %v", err)
	}
	if a.State() != admission.Unavailable {
		t.Fatalf("state %v", a.State())
	}
	f.redis.Start()
	testkit.Eventually(t, "strict again", func() bool { return a.State() == admission.Strict })
	if _, err := a.Acquire(context.Background(), req("orders", s, bulkhead.Normal)); err != nil {
		t.Fatalf("acquire after Redis came back: %v", err)
	}
}

func TestSlowRedisNeverHoldsACheckPastItsDeadline(t *testing.T) {
	f := newFixture(t)
	a := f.replica("a", "orders")
	f.redis.Stop()
	defer f.redis.Continue()
	r := req("orders", settings(2, 0, 0), bulkhead.Normal)
	r.Deadline = time.Now().Add(80 * time.Millisecond)
	start := time.Now()
	_, err := a.Acquire(context.Background(), r)
	if !errors.Is(err, bulkhead.ErrTimeout) {
		t.Fatalf("err %v, want timeout (the Check's deadline came before the ledger's timeout)", err)
	}
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Fatalf("acquire took %v past an 80ms deadline", took)
	}
}

func TestTenantCompartmentIsGlobal(t *testing.T) {
	f := newFixture(t)
	a := f.replica("a", "orders")
	b := f.replica("b", "orders")
	s := settings(4, 4, 5*time.Second)
	tmpl := settings(1, 2, 5*time.Second)
	tr := func(tenant string) Request {
		r := req("orders", s, bulkhead.Normal)
		r.Tenant, r.TenantSettings, r.MaxTenants = tenant, &tmpl, 10
		return r
	}
	x1, err := a.Acquire(context.Background(), tr("x"))
	if err != nil {
		t.Fatal(err)
	}
	x2 := acquireAsync(b, tr("x")) // waits for x's own compartment
	f.inCompartments("orders", 1)
	if _, err := b.Acquire(context.Background(), tr("y")); err != nil {
		t.Fatalf("tenant y behind a waiting x: %v", err)
	}
	a.ReleaseToken("orders", x1, permit.AccessLog)
	if r := <-x2; r.err != nil {
		t.Fatalf("x's waiter: %v", r.err)
	}
}

// A Redis that failed over may have lost the last grants: a changed run id
// reopens adoption, so the running request's next periodic entry counts
// its permit again.
func TestRunIDChangeReopensAdoption(t *testing.T) {
	f := newFixture(t)
	l := New(f.rdb, Config{Prefix: "test:", Replica: "a", Timeout: time.Second, Heartbeat: permit.Heartbeat{Interval: 50 * time.Millisecond, TTL: 50 * time.Millisecond},
		Tick: time.Hour}, f.obs, f.rec, nil)
	ctx := context.Background()
	names := func() []string { return []string{"orders"} }
	l.tick(ctx, names) // strict, run id learnt
	if l.State() != admission.Strict || len(l.masters) != 1 {
		t.Fatalf("state %v, run ids %v", l.State(), l.masters)
	}
	tok, err := l.Acquire(ctx, req("orders", settings(2, 0, 0), bulkhead.Normal))
	if err != nil {
		t.Fatal(err)
	}
	// The grant is lost, as an unreplicated write is in a failover.
	keys := keysOf("test:", "orders")
	f.rdb.ZRem(ctx, keys[1], tok)
	f.rdb.HDel(ctx, keys[2], tok)
	f.rdb.HIncrBy(ctx, keys[0], "inuse", -1)
	time.Sleep(150 * time.Millisecond) // past the adoption window of the bulkhead's first use
	if _, res := l.RenewToken("orders", tok, time.Second, "n"); res != permit.Unknown {
		t.Fatalf("renew of a lost grant outside the window: %v, want unknown", res)
	}
	l.masters = map[string]bool{"a-previous-redis": true}
	l.tick(ctx, names)
	if _, res := l.RenewToken("orders", tok, time.Second, "n"); res != permit.Adopted {
		t.Fatalf("renew after the run id changed: %v, want adopted", res)
	}
	if got := f.inUse("orders"); got != 1 {
		t.Fatalf("in use %d, want 1", got)
	}
}

// On a Redis Cluster: every key of a bulkhead shares its hash tag, so each
// script runs on one shard; bulkheads spread over the shards, and wake-ups
// cross the cluster bus.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	nodes := testkit.StartRedisCluster(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: nodes[:1], IsClusterMode: true,
		ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	names := []string{"orders", "catalog", "auth", "search"}
	start := func(id string) *Ledger {
		l := New(rdb, Config{Prefix: "test:", Replica: id, Timeout: time.Second, Tick: 100 * time.Millisecond,
			Recovery: 300 * time.Millisecond}, &fakeObs{}, newFakeRec(), nil) // a run id taken for gone would pause admissions again and again
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = l.Run(ctx, func() []string { return names }) }()
		t.Cleanup(func() { cancel(); <-done })
		testkit.Eventually(t, "strict on the cluster", func() bool { return l.State() == admission.Strict })
		return l
	}
	a, b := start("a"), start("b")
	for _, name := range names {
		s := settings(1, 2, 5*time.Second)
		tok, err := a.Acquire(context.Background(), req(name, s, bulkhead.Normal))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		w := acquireAsync(b, req(name, s, bulkhead.Normal))
		testkit.Eventually(t, name+" waiter queued", func() bool {
			v, err := rdb.HGet(context.Background(), "test:{"+name+"}:s", "qlen").Int()
			return err == nil && v == 1
		})
		if _, res := a.ReleaseToken(name, tok, permit.AccessLog); res != permit.Released {
			t.Fatalf("%s: release %v", name, res)
		}
		r := <-w
		if r.err != nil {
			t.Fatalf("%s: waiter on the other replica: %v", name, r.err)
		}
		b.ReleaseToken(name, r.token, permit.AccessLog)
	}
	// The bulkheads' keys really are on more than one shard.
	shards := map[string]bool{}
	for _, name := range names {
		slot := redis.NewClient(&redis.Options{Addr: nodes[0]}).ClusterKeySlot(context.Background(), "test:{"+name+"}:s").Val()
		shards[fmt.Sprint(slot*3/16384)] = true
	}
	if len(shards) < 2 {
		t.Fatalf("the bulkheads' slots all fell in one third of the cluster: %v", shards)
	}
}

// Releases and renewals that do not wait: each gets its result once, and
// the count in Redis follows.
func TestAsyncReleasesAndRenewals(t *testing.T) {
	f := newFixture(t)
	a := f.replica("a", "orders")
	s := settings(100, 0, 0)
	var tokens []string
	for range 60 {
		tok, err := a.Acquire(context.Background(), req("orders", s, bulkhead.Normal))
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
	}
	results := make(chan string, 2*len(tokens))
	for i, tok := range tokens {
		if i%2 == 0 {
			a.ReleaseAsync("orders", tok, permit.AccessLog, admission.DoneFunc(func(_ permit.Lease, r permit.Result) { results <- "release " + r.String() }))
		} else {
			a.RenewAsync("orders", tok, time.Minute, "n", admission.DoneFunc(func(_ permit.Lease, r permit.Result) {
				results <- fmt.Sprint("renew ", r == permit.Renewed)
			}))
		}
	}
	got := map[string]int{}
	for range tokens {
		got[<-results]++
	}
	if got["release released"] != 30 || got["renew true"] != 30 {
		t.Fatalf("results %v, want 30 releases and 30 renewals", got)
	}
	if n := f.inUse("orders"); n != 30 {
		t.Fatalf("in use %d, want 30", n)
	}
}

// A Check whose deadline has passed is a timeout, not an unreachable Redis.
func TestDeadlinePassedIsATimeout(t *testing.T) {
	f := newFixture(t)
	a := f.replica("a", "orders")
	r := req("orders", settings(2, 0, 0), bulkhead.Normal)
	r.Deadline = time.Now().Add(-time.Millisecond)
	if _, err := a.Acquire(context.Background(), r); !errors.Is(err, bulkhead.ErrTimeout) {
		t.Fatalf("err %v, want timeout", err)
	}
	if a.State() != admission.Strict {
		t.Fatalf("state %v: a passed deadline is no sign of Redis", a.State())
	}
}

// An Acquire whose answer is lost gives back what its script may hold:
// a release of a queued waiter's token takes it out of the queue, and the
// next waiter is served when capacity frees.
func TestReleaseDropsWaiter(t *testing.T) {
	f := newFixture(t)
	l := f.replica("a", "catalog")
	s := settings(1, 4, 2*time.Second)
	held, err := l.Acquire(context.Background(), req("catalog", s, bulkhead.Normal))
	if err != nil {
		t.Fatal(err)
	}
	first := acquireAsync(l, req("catalog", s, bulkhead.Normal))
	f.queued("catalog", 1)
	second := acquireAsync(l, req("catalog", s, bulkhead.Normal))
	f.queued("catalog", 2)
	var waiter string
	for _, q := range []string{"q1", "q2", "q3"} {
		if m, _ := f.rdb.ZRange(context.Background(), "test:{catalog}:"+q, 0, 0).Result(); len(m) == 1 {
			waiter = m[0]
		}
	}
	if waiter == "" {
		t.Fatal("no waiter found in Redis")
	}
	if _, res := l.ReleaseToken("catalog", waiter, permit.Cancel); res != permit.Unknown {
		t.Fatalf("release of a waiter: %v", res)
	}
	f.queued("catalog", 1)
	if _, res := l.ReleaseToken("catalog", held, permit.AccessLog); res != permit.Released {
		t.Fatalf("release of the holder: %v", res)
	}
	// The waiter left in the queue is granted; the dropped one's wait runs
	// out (max_wait), as nothing will grant it.
	granted := 0
	for _, ch := range []<-chan result{first, second} {
		if r := <-ch; r.err == nil {
			granted++
		} else if !errors.Is(r.err, bulkhead.ErrTimeout) {
			t.Errorf("waiter: %v", r.err)
		}
	}
	if granted != 1 {
		t.Fatalf("%d waiters granted, want the one left in the queue", granted)
	}
	if n := f.inUse("catalog"); n != 1 {
		t.Errorf("in use %d, want the one granted waiter", n)
	}
}
