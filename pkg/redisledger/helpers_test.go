package redisledger

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

type fakeRec struct {
	mu    sync.Mutex
	calls map[admission.Op]int
	errs  map[admission.Op]int
	// cut counts the failed calls that the caller's deadline cut short
	// (ErrCallerDeadline), among errs.
	cut      map[admission.Op]int
	states   []admission.State
	replicas int
}

func newFakeRec() *fakeRec {
	return &fakeRec{calls: map[admission.Op]int{}, errs: map[admission.Op]int{}, cut: map[admission.Op]int{}}
}

func (r *fakeRec) LedgerCall(op admission.Op, _ time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[op]++
	if err != nil {
		r.errs[op]++
	}
	if errors.Is(err, ErrCallerDeadline) {
		r.cut[op]++
	}
}

// cutCalls returns how many calls of op the caller's deadline cut short.
func (r *fakeRec) cutCalls(op admission.Op) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cut[op]
}

// wentUnavailable reports whether a ledger reported the state Unavailable.
func (r *fakeRec) wentUnavailable() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.states, admission.Unavailable)
}
func (r *fakeRec) LedgerState(s admission.State) {
	r.mu.Lock()
	r.states = append(r.states, s)
	r.mu.Unlock()
}
func (r *fakeRec) LedgerReplicas(n int) { r.mu.Lock(); r.replicas = n; r.mu.Unlock() }

type fakeObs struct {
	mu    sync.Mutex
	ended map[permit.Source]int
}

func (o *fakeObs) Ended(_ permit.Lease, src permit.Source, _ time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended == nil {
		o.ended = map[permit.Source]int{}
	}
	o.ended[src]++
}
func (o *fakeObs) Ignored(permit.Source, permit.Result) {}

func (o *fakeObs) count(src permit.Source) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ended[src]
}

// fixture is a test's own redis-server and client. The tests that mostly
// wait on one (the contract suites, the clusters, leases cut off or
// forwarded: 2-5 s each) call t.Parallel and run two at a time once the
// others have ended: 40 s for the package instead of 55 under -race, the
// long pole of make unit. Those that time a fault to within a few hundred
// milliseconds (grace, deadlines) stay serial.
type fixture struct {
	t     testing.TB
	redis *testkit.Redis
	rdb   *redis.Client
	rec   *fakeRec
	obs   *fakeObs
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	srv := testkit.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return &fixture{t: t, redis: srv, rdb: rdb, rec: newFakeRec(), obs: &fakeObs{}}
}

// replica starts a ledger named id on the fixture's Redis, running until
// the test ends, and waits until it is strict.
func (f *fixture) replica(id string, names ...string) *Ledger {
	f.t.Helper()
	l := New(f.rdb, Config{Prefix: "test:", Replica: id, Timeout: time.Second, Recovery: 0, Heartbeat: permit.Heartbeat{Interval: time.Second, TTL: time.Second},
		Tick: 100 * time.Millisecond}, f.obs, f.rec, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx, func() []string { return names }) }()
	f.t.Cleanup(func() { cancel(); <-done })
	testkit.Eventually(f.t, "ledger strict", func() bool { return l.State() == admission.Strict })
	// The subscription is made by Run: wait until Redis counts it.
	testkit.Eventually(f.t, "wake-up channel subscribed", func() bool {
		n, err := f.rdb.PubSubNumSub(context.Background(), "test:wake:"+id).Result()
		return err == nil && n["test:wake:"+id] == 1
	})
	return l
}

// alone returns a ledger on the fixture's Redis that one tick made strict,
// without Run: no ticker moves it back from Unavailable, so its state is
// what the test's own calls left.
func (f *fixture) alone(cfg Config) *Ledger {
	f.t.Helper()
	l := New(f.rdb, cfg, f.obs, f.rec, nil)
	l.tick(context.Background(), nil)
	if l.State() != admission.Strict {
		f.t.Fatalf("state %v after a tick, want strict", l.State())
	}
	return l
}

// pause holds every client's commands for d (CLIENT PAUSE ... ALL): Redis
// is slow, not down. The pause is in force when pause returns.
func (f *fixture) pause(d time.Duration) {
	f.t.Helper()
	if err := f.rdb.Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
		f.t.Fatalf("CLIENT PAUSE: %v", err)
	}
}

func settings(limit, queue int, wait time.Duration) bulkhead.Settings {
	return bulkhead.Settings{MaxConcurrent: limit, MaxQueue: queue, MaxWait: wait}
}

func req(name string, s bulkhead.Settings, p bulkhead.Priority) Request {
	return Request{Bulkhead: name, Priority: p, Settings: s, TTL: 10 * time.Second, Node: "node-a"}
}

// acquireAsync acquires in a goroutine; the result arrives on the channel.
type result struct {
	token string
	err   error
}

func acquireAsync(l *Ledger, r Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		tok, err := l.Acquire(context.Background(), r)
		ch <- result{tok, err}
	}()
	return ch
}

// queued waits until bulkhead name has n waiters in Redis.
func (f *fixture) queued(name string, n int) {
	f.t.Helper()
	testkit.Eventually(f.t, "waiters queued", func() bool {
		v, err := f.rdb.HGet(context.Background(), "test:{"+name+"}:s", "qlen").Int()
		return err == nil && v == n
	})
}

// inCompartments waits until bulkhead name has n waiters in its tenants'
// compartments (blocked by their tenant's own limit).
func (f *fixture) inCompartments(name string, n int) {
	f.t.Helper()
	testkit.Eventually(f.t, "waiters in compartments", func() bool {
		v, err := f.rdb.ZCard(context.Background(), Key("test:", name, "tw")).Result()
		return err == nil && v == int64(n)
	})
}

func (f *fixture) inUse(name string) int {
	v, _ := f.rdb.HGet(context.Background(), "test:{"+name+"}:s", "inuse").Int()
	return v
}
