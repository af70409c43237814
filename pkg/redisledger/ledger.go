package redisledger

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// ErrUnavailable means Redis did not answer in time, or answered with an
// error: the caller applies its on_unavailable policy. The ledger may or
// may not have recorded the operation (a grant that Envoy never hears of
// expires with its lease).
var ErrUnavailable = fmt.Errorf("redis %w", admission.ErrUnavailable)

// ErrCallerDeadline means a call to Redis was cut short by its caller, not
// by Redis: a Check's own deadline came before the ledger's timeout (or
// the caller's context ended). It says nothing of Redis, so it never makes
// the replica Unavailable; Acquire returns it wrapped with
// bulkhead.ErrTimeout, as that Check's timeout. It is
// admission.ErrCallerDeadline, which the metrics know.
var ErrCallerDeadline = admission.ErrCallerDeadline

// Recorder receives what the ledger measures; *metrics.Metrics is one.
type Recorder interface {
	// LedgerCall times one call to Redis by operation; err is its error.
	LedgerCall(op admission.Op, d time.Duration, err error)
	// LedgerState reports a change of availability.
	LedgerState(s admission.State)
	// LedgerReplicas reports the live replicas Redis knows of.
	LedgerReplicas(n int)
}

// Config is what a Ledger needs besides its Redis client.
type Config struct {
	// Prefix starts every key and channel name.
	Prefix string
	// Replica names this process among the replicas (unique, no '\n').
	Replica string
	// Timeout bounds one call to Redis. A Check's own deadline may cut it
	// shorter; only a call that had the whole Timeout and failed makes the
	// replica Unavailable.
	Timeout time.Duration
	// Recovery is how long a bulkhead whose state Redis lost admits no one.
	Recovery time.Duration
	// Heartbeat is the lease contract with Envoy's periodic entries: the
	// TTL renewals extend leases to, and the adoption window
	// (permit.Heartbeat.AdoptFor) in which unknown tokens are adopted.
	Heartbeat permit.Heartbeat
	// Known reports whether a bulkhead is configured: an entry naming
	// another never reaches Redis (nil: every name is).
	Known func(bulkhead string) bool
	// Tick is how often the replica says it is alive, and looks at each
	// bulkhead (expiry, the queue, the global counts, Global). Default 1s.
	Tick time.Duration
}

// adopt is how long unknown tokens are adopted after Redis starts a
// bulkhead's state or loses it.
func (c Config) adopt() time.Duration { return c.Heartbeat.AdoptFor() }

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

	state atomic.Int32 // admission.State
	// strictAt is when the ledger last became strict (unix ns; 0: never),
	// for HearsAllSince.
	strictAt atomic.Int64
	replicas atomic.Int32 // live replicas, last seen (at least 1)
	kick     chan struct{}
	jobs     chan job // releases and renewals for the batcher
	// downLogged is when the ticker last logged that Redis does not
	// answer (zero: it answered since); only the ticker's goroutine uses it.
	downLogged time.Time
	// masters are the run ids of the masters last heard (ticker only).
	masters map[string]bool
	// global is, per bulkhead, its counts summed over every replica as
	// Redis last reported them to the ticker (Global).
	globalMu sync.Mutex
	global   map[string]admission.Global
	// calm decides which bulkheads the ticker looks at each tick (calm.go).
	calm calm
	// inLease, with capacity leases, is how many permits this replica's
	// lease of a bulkhead has in use (NewCapacity sets it before the ledger
	// serves; nil without leases).
	inLease func(bulkhead string) int
	// lease, with capacity leases, takes the wake-ups for this replica's
	// leases (NewCapacity sets it before the ledger runs; nil without).
	lease leaseWakeups
}

// leaseWakeups are the wake-ups a replica's capacity leases take (Capacity).
type leaseWakeups interface {
	// recall: give back the lease's unused permits now.
	recall(bulkhead string)
	// forwarded: an end entry (ended) or a periodic one of token reached
	// another replica, and Redis does not know the token.
	forwarded(ended bool, bulkhead, token string)
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
		jobs:   make(chan job, 4*maxBatch),
		global: map[string]admission.Global{}, calm: newCalm()}
	l.state.Store(int32(admission.Unavailable)) // until Run has heard from Redis
	l.replicas.Store(1)
	return l
}

// Global returns bulkhead's state summed over every replica, as Redis
// counted it at the ticker's last look, and false until the ticker has
// looked at it. A bulkhead with something to do in Redis is looked at each
// Tick; a calm one (calm.go) every lookEvery ticks, and each round its
// capacity lease is renewed, if it holds one here.
func (l *Ledger) Global(bulkhead string) (admission.Global, bool) {
	l.globalMu.Lock()
	defer l.globalMu.Unlock()
	g, ok := l.global[bulkhead]
	return g, ok
}

// setGlobal keeps bulkhead's global state for Global.
func (l *Ledger) setGlobal(bulkhead string, g admission.Global) {
	l.globalMu.Lock()
	defer l.globalMu.Unlock()
	l.global[bulkhead] = g
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

// call runs one script with a time limit: the ledger's timeout, cut to the
// deadline (a Check's) when one is given and comes first. A failure marks
// Redis unavailable, unless the deadline cut the call and has passed: that
// is the Check's timeout (bulkhead.ErrTimeout and ErrCallerDeadline), and
// says nothing of Redis. Otherwise the error wraps ErrUnavailable.
func (l *Ledger) call(ctx context.Context, deadline time.Time, op admission.Op, s *redis.Script, keys []string, args ...any) (any, error) {
	start := time.Now()
	cut := cutBy(deadline, start, l.cfg.Timeout)
	timeout := l.cfg.Timeout
	if !cut.IsZero() {
		timeout = cut.Sub(start)
	}
	if timeout <= 0 {
		err := checkTimeout(op, context.DeadlineExceeded)
		l.rec.LedgerCall(op, 0, err)
		return nil, err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	res, err := s.Run(cctx, l.rdb, keys, args...).Result()
	if err != nil && passed(cut) {
		err = checkTimeout(op, err)
		l.rec.LedgerCall(op, time.Since(start), err)
		return nil, err
	}
	l.rec.LedgerCall(op, time.Since(start), err)
	if err != nil {
		l.unavailable(op, err)
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
	return res, nil
}

// scriptRun is one run of a script: its keys and arguments.
type scriptRun struct {
	keys []string
	args []any
}

// callResult is the answer to one run of callAll, or its error (wrapping
// ErrUnavailable).
type callResult struct {
	val any
	err error
}

// callAll runs s once per run of runs, all in one round trip (a pipeline;
// a Cluster client sends each node its own, at once), within the ledger's
// timeout, and returns each run's answer in order. Each run is one call as
// Redis sees it (the recorder counts it so); a failed one marks Redis
// unavailable, as call does. A run whose script Redis did not have
// (NOSCRIPT: a restarted or failed-over master) runs again once the script
// is loaded.
func (l *Ledger) callAll(ctx context.Context, op admission.Op, s *redis.Script, runs []scriptRun) []callResult {
	out := make([]callResult, len(runs))
	if len(runs) == 1 {
		out[0].val, out[0].err = l.call(ctx, time.Time{}, op, s, runs[0].keys, runs[0].args...)
		return out
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.Timeout)
	defer cancel()
	cmds := l.pipeRuns(cctx, s, runs)
	var again []scriptRun
	var at []int
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again, at = append(again, runs[i]), append(at, i)
		}
	}
	if len(again) > 0 && s.Load(cctx, l.rdb).Err() == nil {
		for k, c := range l.pipeRuns(cctx, s, again) {
			cmds[at[k]] = c
		}
	}
	d := time.Since(start) / time.Duration(len(runs))
	for i, c := range cmds {
		res, err := c.Result()
		l.rec.LedgerCall(op, d, err)
		if err != nil {
			l.unavailable(op, err)
			err = fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
		}
		out[i] = callResult{res, err}
	}
	return out
}

// firstErr is the first error among cmds (what a pipeline's Exec returns).
func firstErr(cmds []*redis.Cmd) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

// pipeRuns sends runs of s (EVALSHA) in one pipeline; the look (state.go)
// and callAll share it.
func (l *Ledger) pipeRuns(ctx context.Context, s *redis.Script, runs []scriptRun) []*redis.Cmd {
	pipe := l.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(runs))
	for i, r := range runs {
		cmds[i] = s.EvalSha(ctx, pipe, r.keys, r.args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	return cmds
}

// cutBy returns deadline when it comes before limit has elapsed from
// start, so cuts a call short; zero otherwise (the call has its full time
// limit, and its failure is Redis's).
func cutBy(deadline, start time.Time, limit time.Duration) time.Time {
	if deadline.IsZero() || !deadline.Before(start.Add(limit)) {
		return time.Time{}
	}
	return deadline
}

// passed reports whether cut, the deadline that cut a call short (zero:
// none), has passed: a call that failed then was ended by its caller, not
// by Redis. Only the other failures are judged (Unavailable): a Check's
// deadline is that Check's timeout, never Redis's outage.
func passed(cut time.Time) bool { return !cut.IsZero() && !time.Now().Before(cut) }

// checkTimeout is the error of a call that the Check's deadline cut short:
// a timeout of that Check, which callers answer as such.
func checkTimeout(op admission.Op, err error) error {
	return fmt.Errorf("%w: %w: %s: %w", bulkhead.ErrTimeout, ErrCallerDeadline, op, err)
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

// Holders implements admission.Ledger: the leases of bulkhead held across
// every replica, read from Redis (none while it does not answer).
func (l *Ledger) Holders(name string, max int) ([]permit.Lease, int) {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Timeout)
	defer cancel()
	var info *redis.MapStringStringCmd
	var now *redis.TimeCmd
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		info = p.HGetAll(ctx, l.keysOf(name)[keyInfo])
		return nil
	})
	if err != nil {
		return nil, 0
	}
	at := now.Val().UnixMilli()
	leases := make([]permit.Lease, 0, len(info.Val()))
	for token, v := range info.Val() {
		leases = append(leases, leaseOf(name, token, v, at))
	}
	sort.Slice(leases, func(i, j int) bool { return leases[i].Acquired.Before(leases[j].Acquired) })
	n := len(leases)
	return leases[:min(max, n)], n
}
