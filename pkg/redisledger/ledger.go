package redisledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// ErrUnavailable means Redis did not answer in time, or answered with an
// error: the caller applies its on_unavailable policy. The ledger may or
// may not have recorded the operation (a grant that Envoy never hears of
// expires with its lease).
var ErrUnavailable = errors.New("redis ledger unavailable")

// Recorder receives what the ledger measures; *metrics.Metrics is one.
type Recorder interface {
	// LedgerCall times one call to Redis by operation; err is its error.
	LedgerCall(op Op, d time.Duration, err error)
	// LedgerState reports a change of availability.
	LedgerState(s State)
	// LedgerReplicas reports the live replicas Redis knows of.
	LedgerReplicas(n int)
	// LedgerGlobal reports a bulkhead's state summed over every replica,
	// as Redis counts it.
	LedgerGlobal(bulkhead string, g Global)
}

// Global is a bulkhead's state in Redis, every replica's together.
type Global struct {
	InUse int
	// Queued is indexed by bulkhead.Priority.
	Queued [3]int
	// Recovering: the bulkhead's recovery window holds admissions (Redis
	// had no state for it, or a master's run id is gone).
	Recovering bool
}

// Op names a call to Redis; its value is a metric label.
type Op string

// The operations.
const (
	OpAcquire  Op = "acquire"
	OpRelease  Op = "release"
	OpRenew    Op = "renew"
	OpLeave    Op = "leave"
	OpState    Op = "state"
	OpReplicas Op = "replicas"
	OpReopen   Op = "reopen"
)

// Ops lists every operation.
func Ops() []Op { return []Op{OpAcquire, OpRelease, OpRenew, OpLeave, OpState, OpReplicas, OpReopen} }

// Config is what a Ledger needs besides its Redis client.
type Config struct {
	// Prefix starts every key and channel name.
	Prefix string
	// Replica names this process among the replicas (unique, no '\n').
	Replica string
	// Timeout bounds one call to Redis (a Check's own deadline may cut it
	// shorter).
	Timeout time.Duration
	// Recovery is how long a bulkhead whose state Redis lost admits no one,
	// and Adopt how long unknown tokens in periodic entries are adopted
	// (the heartbeat TTL plus one interval).
	Recovery, Adopt time.Duration
	// Tick is how often the replica says it is alive, and looks at each
	// bulkhead (expiry, the queue, the global gauges). Default 1s.
	Tick time.Duration
	// LocalShareFor, when positive, is how long a replica cut off from
	// Redis may admit its share of each limit alone (ledger.on_unavailable:
	// local_share), once it has been cut off for longer than Redis takes to
	// notice (replicaStale ticks). Meanwhile the replicas that still reach
	// Redis hold the absent replicas' shares back from every ceiling, so
	// the sum holds in a partial outage too. 0: no replica admits alone.
	LocalShareFor time.Duration
}

// stale is how long a replica that stopped looking at a bulkhead is taken
// for one that may be admitting alone.
func (c Config) stale() time.Duration { return replicaStale * c.Tick }

// Ledger is the permit ledger on Redis. Safe for concurrent use.
type Ledger struct {
	rdb  redis.UniversalClient
	cfg  Config
	sc   scripts
	obs  permit.Observer
	rec  Recorder
	log  *slog.Logger
	wake *waiters
	keys sync.Map // bulkhead name -> []string

	state    atomic.Int32 // State
	down     atomic.Int64 // when the current outage began (UnixNano); see LocalShareOK
	replicas atomic.Int32 // live replicas, last seen (at least 1)
	kick     chan struct{}
	jobs     chan job // releases and renewals for the batcher
	// downLogged is when the ticker last logged that Redis does not
	// answer (zero: it answered since); only the ticker's goroutine uses it.
	downLogged time.Time
	// masters are the run ids of the masters last heard (ticker only).
	masters map[string]bool
}

// New returns a ledger on rdb. It does not contact Redis: Run does.
func New(rdb redis.UniversalClient, cfg Config, obs permit.Observer, rec Recorder, log *slog.Logger) *Ledger {
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Ledger{rdb: rdb, cfg: cfg, sc: loadScripts(), obs: obs, rec: rec, log: log, wake: newWaiters(), kick: make(chan struct{}, 1),
		jobs: make(chan job, 4*maxBatch)}
	l.state.Store(int32(Unavailable)) // until Run has heard from Redis
	l.down.Store(time.Now().UnixNano())
	l.replicas.Store(1)
	return l
}

func (l *Ledger) keysOf(name string) []string {
	if ks, ok := l.keys.Load(name); ok {
		return ks.([]string)
	}
	ks := keysOf(l.cfg.Prefix, name)
	l.keys.Store(name, ks)
	return ks
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// Request is one Check's ask for a permit.
type Request struct {
	Bulkhead string
	Priority bulkhead.Priority
	Settings bulkhead.Settings
	// Tenant is the request's tenant ("" for none); TenantSettings the
	// bulkhead's tenant template (nil: no tenants), MaxTenants the cap.
	Tenant         string
	TenantSettings *bulkhead.Settings
	MaxTenants     int
	TTL            time.Duration
	Node           string
	// Deadline ends the wait (zero: only max_wait does).
	Deadline time.Time
}

// maxUnboundedWait bounds a wait with neither max_wait nor a deadline.
const maxUnboundedWait = time.Minute

// Acquire takes a permit of r.Bulkhead for r, waiting in the bulkhead's
// global queue if need be, and returns its token. The error is a
// *bulkhead.Rejection, ctx's error, or wraps ErrUnavailable.
func (l *Ledger) Acquire(ctx context.Context, r Request) (string, error) {
	if State(l.state.Load()) != Strict {
		return "", ErrUnavailable
	}
	token, err := permit.NewToken()
	if err != nil {
		return "", err
	}
	now := time.Now()
	wait := r.Settings.MaxWait
	if !r.Deadline.IsZero() {
		if left := r.Deadline.Sub(now); wait == 0 || left < wait {
			wait = left
		}
	} else if wait == 0 {
		wait = maxUnboundedWait
	}
	p := r.Priority
	if !p.Valid() {
		p = bulkhead.BestEffort
	}
	tlim, tmq, maxTenants := 0, 0, r.MaxTenants
	if r.TenantSettings != nil && r.Tenant != "" {
		tlim, tmq = r.TenantSettings.MaxConcurrent, r.TenantSettings.MaxQueue
	}
	if maxTenants <= 0 {
		maxTenants = 1 << 30
	}
	w := l.wake.add(token) // before the script: a wake-up may beat its answer
	defer l.wake.remove(token)
	res, err := l.call(ctx, r.Deadline, OpAcquire, l.sc.acquire, l.keysOf(r.Bulkhead),
		token, int(p), ms(r.TTL), ms(wait), l.cfg.Replica, r.Node, r.Tenant,
		r.Settings.Ceiling(bulkhead.Critical), r.Settings.Ceiling(bulkhead.Normal), r.Settings.Ceiling(bulkhead.BestEffort),
		r.Settings.MaxQueue, tlim, tmq, maxTenants, ms(l.cfg.Recovery), ms(l.cfg.Adopt), ms(l.heldBack()))
	if err != nil {
		// The script may have run, and granted or queued: give back what
		// it may hold, when Redis answers, rather than at its lease's end.
		select {
		case l.jobs <- job{name: r.Bulkhead, token: token, release: true, src: permit.Cancel,
			released: func(permit.Lease, permit.Result) {}}:
		default:
		}
		return "", err
	}
	code, detail, swept, at := reply(res)
	l.expired(r.Bulkhead, swept, at)
	switch code {
	case 1:
		return token, nil
	case 3:
		return "", rejection(detail)
	}
	// Queued: wait for a wake-up, max_wait, or the Check's end.
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var recovered <-chan time.Time
	if left, _ := detail.(int64); left > 0 {
		// The bulkhead recovers: serve its queue when the window ends.
		t := time.NewTimer(time.Duration(left) * time.Millisecond)
		defer t.Stop()
		recovered = t.C
	}
	for {
		select {
		case m := <-w:
			if m == wakeGranted {
				return token, nil
			}
			return "", bulkhead.ErrShed
		case <-recovered:
			recovered = nil
			l.look(ctx, r.Bulkhead)
		case <-timer.C:
			return l.leave(ctx, r.Bulkhead, token, w, bulkhead.ErrTimeout)
		case <-ctx.Done():
			return l.leave(ctx, r.Bulkhead, token, w, ctx.Err())
		}
	}
}

// heldBack is the acquire script's stale argument: with local shares, how
// long a replica may stop looking before its share is held back.
func (l *Ledger) heldBack() time.Duration {
	if l.cfg.LocalShareFor <= 0 {
		return 0
	}
	return l.cfg.stale()
}

// LocalShareOK reports whether this replica may admit its share alone now:
// Redis has not answered for longer than the others take to hold that
// share back, and for less than LocalShareFor after that.
func (l *Ledger) LocalShareOK() bool {
	if l.cfg.LocalShareFor <= 0 || l.State() == Strict {
		return false
	}
	out := time.Since(time.Unix(0, l.down.Load()))
	return out >= l.cfg.stale()+l.cfg.Tick && out < l.cfg.stale()+l.cfg.LocalShareFor
}

// leave takes a waiter out of the queue after its wait ended with cause
// (ErrTimeout, or the context's error). A permit granted at that moment is
// kept on a timeout (it came in time) and given back otherwise.
func (l *Ledger) leave(ctx context.Context, name, token string, w <-chan wakeMsg, cause error) (string, error) {
	keep := errors.Is(cause, bulkhead.ErrTimeout)
	keepArg := "0"
	if keep {
		keepArg = "1"
	}
	res, err := l.call(context.WithoutCancel(ctx), time.Time{}, OpLeave, l.sc.leave, l.keysOf(name), token, keepArg)
	if err != nil {
		// Not known: a permit granted meanwhile expires with its lease.
		return "", cause
	}
	code, _, _, _ := reply(res)
	switch code {
	case 2:
		return token, nil
	case 4:
		// Shed (its wake-up may still be on its way) or purged.
		select {
		case m := <-w:
			if m == wakeShed {
				return "", bulkhead.ErrShed
			}
		default:
		}
	}
	return "", cause
}

func rejection(detail any) error {
	switch detail {
	case "timeout":
		return bulkhead.ErrTimeout
	default:
		return bulkhead.ErrQueueFull
	}
}

// Release ends token's lease in bulkhead name.
func (l *Ledger) Release(name, token string, src permit.Source) (permit.Lease, permit.Result) {
	if !permit.ValidToken(token) {
		l.obs.Ignored(src, permit.Unknown)
		return permit.Lease{}, permit.Unknown
	}
	res, err := l.call(context.Background(), time.Time{}, OpRelease, l.sc.release, l.keysOf(name), token,
		ms(l.cfg.Recovery), ms(l.cfg.Adopt))
	return l.released(name, token, src, res, err)
}

// released interprets the release script's answer (or err).
func (l *Ledger) released(name, token string, src permit.Source, res any, err error) (permit.Lease, permit.Result) {
	if err != nil {
		return permit.Lease{}, Failed
	}
	code, detail, swept, at := reply(res)
	l.expired(name, swept, at)
	switch code {
	case 1:
		lease := leaseOf(name, token, detail, at)
		l.obs.Ended(lease, src, time.Now())
		return lease, permit.Released
	case 2:
		l.obs.Ignored(src, permit.Duplicate)
		return permit.Lease{}, permit.Duplicate
	case 3:
		l.obs.Ignored(src, permit.Expired)
		return permit.Lease{}, permit.Expired
	default:
		l.obs.Ignored(src, permit.Unknown)
		return permit.Lease{}, permit.Unknown
	}
}

// Failed is the result of a Release or Renew that did not reach Redis.
const Failed permit.Result = 255

// RenewResult says what a periodic entry did to the shared ledger.
type RenewResult uint8

// The results of Renew.
const (
	Renewed         RenewResult = iota + 1
	AdoptedExpired              // its lease had expired while the request ran
	AdoptedUnknown              // unknown token, adopted in the adoption window
	Late                        // its request has ended
	UnknownToken                // unknown, outside the adoption window
	RenewFailed                 // Redis did not answer
	numRenewResults = RenewFailed
)

// Renew extends token's lease to ttl from now, or adopts the running
// request's permit (past the limit if need be) when Redis lost it or it
// expired; force adopts whatever the adoption window (a hand-over).
func (l *Ledger) Renew(name, token string, ttl time.Duration, node string, force bool) (permit.Lease, RenewResult) {
	if !permit.ValidToken(token) {
		return permit.Lease{}, UnknownToken
	}
	res, err := l.call(context.Background(), time.Time{}, OpRenew, l.sc.renew, l.keysOf(name), token, ms(ttl), node,
		ms(l.cfg.Recovery), ms(l.cfg.Adopt), forceArg(force))
	return l.renewedResult(name, token, res, err)
}

func forceArg(force bool) string {
	if force {
		return "1"
	}
	return "0"
}

// renewedResult interprets the renew script's answer (or err).
func (l *Ledger) renewedResult(name, token string, res any, err error) (permit.Lease, RenewResult) {
	if err != nil {
		return permit.Lease{}, RenewFailed
	}
	code, detail, swept, at := reply(res)
	l.expired(name, swept, at)
	lease := permit.Lease{Token: token, Bulkhead: name}
	if code == 1 {
		lease = leaseOf(name, token, detail, at)
	}
	return lease, RenewResult(code)
}

// call runs one script with a time limit: the ledger's timeout, cut to the
// deadline when one is given. Any failure marks Redis unavailable.
func (l *Ledger) call(ctx context.Context, deadline time.Time, op Op, s *redis.Script, keys []string, args ...any) (any, error) {
	timeout := l.cfg.Timeout
	if !deadline.IsZero() {
		if left := time.Until(deadline); left < timeout {
			timeout = left
		}
	}
	if timeout <= 0 {
		l.rec.LedgerCall(op, 0, context.DeadlineExceeded)
		return nil, fmt.Errorf("%w: %s: no time left before the Check's deadline", ErrUnavailable, op)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	start := time.Now()
	res, err := s.Run(cctx, l.rdb, keys, args...).Result()
	l.rec.LedgerCall(op, time.Since(start), err)
	if err != nil {
		l.unavailable(op, err)
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
	return res, nil
}

// reply unpacks {code, detail, swept, now} (missing elements are zero).
func reply(res any) (code int64, detail any, swept []any, now int64) {
	a, _ := res.([]any)
	if len(a) > 0 {
		code, _ = a[0].(int64)
	}
	if len(a) > 1 {
		detail = a[1]
	}
	if len(a) > 2 {
		swept, _ = a[2].([]any)
	}
	if len(a) > 3 {
		now, _ = a[3].(int64)
	}
	return code, detail, swept, now
}

// expired tells the observer of leases a script reclaimed.
func (l *Ledger) expired(name string, acquired []any, redisNow int64) {
	now := time.Now()
	for _, a := range acquired {
		ms, _ := a.(int64)
		l.obs.Ended(permit.Lease{Bulkhead: name, Acquired: localTime(ms, redisNow, now)}, permit.TTL, now)
	}
}

// localTime maps t (ms on Redis's clock, read at redisNow) to this
// process's clock, read at now: Redis's clock stamps leases, this one
// measures.
func localTime(t, redisNow int64, now time.Time) time.Time {
	return now.Add(-time.Duration(redisNow-t) * time.Millisecond)
}

// leaseOf parses the lease info a script returned.
func leaseOf(name, token string, info any, redisNow int64) permit.Lease {
	s, _ := info.(string)
	f := strings.SplitN(s, "\n", 5)
	lease := permit.Lease{Token: token, Bulkhead: name}
	if len(f) < 5 {
		return lease
	}
	now := time.Now()
	prio, _ := strconv.ParseInt(f[0], 10, 8)
	acq, _ := strconv.ParseInt(f[1], 10, 64)
	ren, _ := strconv.ParseInt(f[2], 10, 64)
	lease.Priority = bulkhead.Priority(prio)
	lease.Acquired = localTime(acq, redisNow, now)
	if ren > 0 {
		lease.Renewed = localTime(ren, redisNow, now)
	}
	lease.Node = f[3]
	return lease
}
