package redisledger

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// idle returns a strict ledger on the fixture's Redis that never ticks:
// no state script runs between a test's steps to put the counts right.
func (f *fixture) idle() *Ledger {
	f.t.Helper()
	l := New(f.rdb, Config{Prefix: "test:", Replica: "a", Timeout: time.Second, Heartbeat: permit.Heartbeat{Interval: time.Second, TTL: time.Second},
		Tick: time.Hour}, f.obs, f.rec, nil)
	l.tick(context.Background(), nil)
	if l.State() != admission.Strict {
		f.t.Fatalf("state %v", l.State())
	}
	return l
}

// twice runs a script twice with the same arguments, as a client that
// retries after a lost answer does, and returns both codes.
func (f *fixture) twice(l *Ledger, s *redis.Script, name string, args ...any) [2]int64 {
	f.t.Helper()
	var codes [2]int64
	for i := range codes {
		res, err := s.Run(context.Background(), f.rdb, l.keysOf(name), args...).Result()
		if err != nil {
			f.t.Fatalf("run %d: %v", i+1, err)
		}
		codes[i], _, _, _ = reply(res)
	}
	return codes
}

// counts checks that bulkhead name's counters equal the sets they count:
// inuse the leases, q1..q3 and qlen the waiters, T and TQ the tenants of
// the leases and of the waiters. It returns inuse and qlen.
func (f *fixture) counts(name string) (inuse, qlen int) {
	f.t.Helper()
	ctx := context.Background()
	k := keysOf("test:", name)
	st := f.rdb.HMGet(ctx, k[0], "inuse", "qlen", "q1", "q2", "q3").Val()
	atoi := func(v any) int { s, _ := v.(string); n, _ := strconv.Atoi(s); return n }
	if leases := int(f.rdb.ZCard(ctx, k[1]).Val()); atoi(st[0]) != leases {
		f.t.Errorf("%s: inuse %d, leases %d", name, atoi(st[0]), leases)
	}
	sum := 0
	for c := range 3 {
		n := int(f.rdb.ZCard(ctx, k[3+c]).Val())
		if atoi(st[2+c]) != n {
			f.t.Errorf("%s: q%d %d, waiters %d", name, c+1, atoi(st[2+c]), n)
		}
		sum += n
	}
	if atoi(st[1]) != sum {
		f.t.Errorf("%s: qlen %d, waiters %d", name, atoi(st[1]), sum)
	}
	for _, kk := range [][2]string{{k[2], k[8]}, {k[6], k[9]}} {
		want := map[string]string{}
		for _, info := range f.rdb.HVals(ctx, kk[0]).Val() {
			if f := strings.SplitN(info, "\n", 5); len(f) == 5 && f[4] != "" {
				n, _ := strconv.Atoi(want[f[4]])
				want[f[4]] = strconv.Itoa(n + 1)
			}
		}
		got := f.rdb.HGetAll(ctx, kk[1]).Val()
		same := len(got) == len(want)
		for t, n := range want {
			same = same && got[t] == n
		}
		if !same {
			f.t.Errorf("%s: %s %v, from %s %v", name, kk[1], got, kk[0], want)
		}
	}
	return atoi(st[0]), atoi(st[1])
}

// Every script may run twice with one token (go-redis's cluster client
// retries a command after EOF or a reset connection though the script ran):
// the second run counts nothing again, and answers as the first did.
func TestScriptsRunTwiceCountOnce(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	ctx := context.Background()
	s := settings(2, 4, 5*time.Second)
	tmpl := settings(2, 4, 5*time.Second)
	tenantReq := func(name string) Request {
		r := req(name, s, bulkhead.Normal)
		r.Tenant, r.TenantSettings, r.MaxTenants = "x", &tmpl, 10
		return r
	}
	newToken := func() string {
		tok, err := permit.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	hold := func(name string) string {
		tok, err := l.Acquire(ctx, req(name, s, bulkhead.Critical))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	// queue makes token a waiter of name (both permits held).
	queue := func(name, token string) {
		hold(name)
		hold(name)
		res, err := l.sc.acquire.Run(ctx, f.rdb, l.keysOf(name), l.acquireArgs(token, tenantReq(name), 5*time.Second)...).Result()
		if code, _, _, _ := reply(res); err != nil || code != acquireQueued {
			t.Fatalf("queue %s: %v %v", token, code, err)
		}
	}
	for _, tc := range []struct {
		name        string
		run         func(name, token string) [2]int64
		want        [2]int64
		inuse, qlen int
	}{
		{"acquire granted", func(name, token string) [2]int64 {
			return f.twice(l, l.sc.acquire, name, l.acquireArgs(token, tenantReq(name), 5*time.Second)...)
		}, [2]int64{acquireGranted, acquireGranted}, 1, 0},
		{"acquire queued", func(name, token string) [2]int64 {
			hold(name)
			hold(name)
			return f.twice(l, l.sc.acquire, name, l.acquireArgs(token, tenantReq(name), 5*time.Second)...)
		}, [2]int64{acquireQueued, acquireQueued}, 2, 1},
		{"release", func(name, _ string) [2]int64 {
			token := hold(name)
			return f.twice(l, l.sc.release, name, token, 0, 2000)
		}, [2]int64{releaseReleased, releaseDuplicate}, 0, 0},
		{"release grants the waiter", func(name, token string) [2]int64 {
			queue(name, token)
			held := f.rdb.ZRange(ctx, l.keysOf(name)[1], 0, 0).Val()[0]
			return f.twice(l, l.sc.release, name, held, 0, 2000)
		}, [2]int64{releaseReleased, releaseDuplicate}, 2, 0},
		{"release of a waiter", func(name, token string) [2]int64 {
			queue(name, token)
			return f.twice(l, l.sc.release, name, token, 0, 2000)
		}, [2]int64{releaseWaiter, releaseDuplicate}, 2, 0},
		{"renew adopts", func(name, token string) [2]int64 {
			return f.twice(l, l.sc.renew, name, token, 5000, "node-a", 0, 2000, "1")
		}, [2]int64{renewAdoptedUnknown, renewRenewed}, 1, 0},
		{"leave", func(name, token string) [2]int64 {
			queue(name, token)
			return f.twice(l, l.sc.leave, name, token, "0")
		}, [2]int64{leaveLeft, leaveNotFound}, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "-")
			if got := tc.run(name, newToken()); got != tc.want {
				t.Errorf("codes %v, want %v", got, tc.want)
			}
			inuse, qlen := f.counts(name)
			if inuse != tc.inuse || qlen != tc.qlen {
				t.Errorf("inuse %d, qlen %d; want %d, %d", inuse, qlen, tc.inuse, tc.qlen)
			}
		})
	}
}

// The fault as it was seen: one lost answer on a limit of 2 took a permit
// for good; after the release, both permits are free again.
func TestAcquireRunTwiceLeaksNoPermit(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	ctx := context.Background()
	s := settings(2, 0, 0)
	tok, err := permit.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if got := f.twice(l, l.sc.acquire, "orders", l.acquireArgs(tok, req("orders", s, bulkhead.Normal), 0)...); got != [2]int64{acquireGranted, acquireGranted} {
		t.Fatalf("codes %v", got)
	}
	if _, res := l.ReleaseToken("orders", tok, permit.AccessLog); res != permit.Released {
		t.Fatalf("release: %v", res)
	}
	for i := range 2 {
		if _, err := l.Acquire(ctx, req("orders", s, bulkhead.Normal)); err != nil {
			t.Fatalf("acquire %d of 2 after the release: %v", i+1, err)
		}
	}
}

// Counts that drifted from the sets they count (whatever the cause) are put
// right by the next look, and admissions follow the sets again.
func TestLookReconcilesCounts(t *testing.T) {
	f := newFixture(t)
	l := f.idle()
	ctx := context.Background()
	s := settings(1, 4, 5*time.Second)
	// x's limit 2: its waiter waits for the bulkhead's permit, in its queue.
	tmpl := settings(2, 4, 5*time.Second)
	r := req("orders", s, bulkhead.Normal)
	r.Tenant, r.TenantSettings, r.MaxTenants = "x", &tmpl, 10
	held, err := l.Acquire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := permit.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.sc.acquire.Run(ctx, f.rdb, l.keysOf("orders"), l.acquireArgs(waiter, r, 5*time.Second)...).Result()
	if code, _, _, _ := reply(res); err != nil || code != acquireQueued {
		t.Fatalf("queue: %v %v", code, err)
	}
	k := keysOf("test:", "orders")
	f.rdb.HIncrBy(ctx, k[0], "inuse", 5)
	f.rdb.HIncrBy(ctx, k[0], "qlen", 3)
	f.rdb.HIncrBy(ctx, k[0], "q2", -1)
	f.rdb.HIncrBy(ctx, k[8], "x", 2)
	f.rdb.HSet(ctx, k[8], "ghost", 1)
	f.rdb.HDel(ctx, k[9], "x")
	l.look(ctx, "orders")
	if inuse, qlen := f.counts("orders"); inuse != 1 || qlen != 1 {
		t.Fatalf("after the look: inuse %d, qlen %d; want 1, 1", inuse, qlen)
	}
	// The release hands the permit to the waiter, as the sets say it may.
	if _, res := l.ReleaseToken("orders", held, permit.AccessLog); res != permit.Released {
		t.Fatalf("release: %v", res)
	}
	if f.rdb.ZScore(ctx, k[1], waiter).Err() != nil {
		t.Fatal("the waiter was not granted the freed permit")
	}
	if inuse, qlen := f.counts("orders"); inuse != 1 || qlen != 0 {
		t.Fatalf("after the release: inuse %d, qlen %d; want 1, 0", inuse, qlen)
	}
}

// After Redis lost its data, the end of a request it no longer knows is
// remembered: a late periodic entry adopts nothing, in the adoption window
// (renewed at once or batched), and an acquire of that token that arrives after
// its release (the caller gave up on the answer) grants nothing.
func TestReleaseOfUnknownTokenIsRemembered(t *testing.T) {
	f := newFixture(t)
	l := f.replica("a", "orders")
	ctx := context.Background()
	if err := f.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var toks [3]string
	for i := range toks {
		tok, err := permit.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		toks[i] = tok
		if _, res := l.ReleaseToken("orders", tok, permit.AccessLog); res != permit.Unknown {
			t.Fatalf("release of an unknown token: %v", res)
		}
	}
	if _, res := l.RenewToken("orders", toks[0], 5*time.Second, "node-a"); res != permit.Late {
		t.Errorf("renewal in the adoption window after the release: %v, want late", res)
	}
	done := make(chan permit.Result, 1)
	l.RenewAsync("orders", toks[1], 5*time.Second, "node-a", admission.DoneFunc(func(_ permit.Lease, res permit.Result) { done <- res }))
	if res := <-done; res != permit.Late {
		t.Errorf("batched renewal after the release: %v, want late", res)
	}
	res, err := l.sc.acquire.Run(ctx, f.rdb, l.keysOf("orders"), l.acquireArgs(toks[2], req("orders", settings(10, 0, 0), bulkhead.Normal), 0)...).Result()
	if code, _, _, _ := reply(res); err != nil || code != acquireRejected {
		t.Errorf("acquire after its release: %v %v, want rejected", code, err)
	}
	if _, res := l.ReleaseToken("orders", toks[0], permit.AccessLog); res != permit.Duplicate {
		t.Errorf("second release: %v, want duplicate", res)
	}
	if inuse, _ := f.counts("orders"); inuse != 0 {
		t.Errorf("in use %d, want 0", inuse)
	}
}
