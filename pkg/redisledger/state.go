package redisledger

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
)

// State returns the current state.
func (l *Ledger) State() admission.State { return admission.State(l.state.Load()) }

// Reachable reports whether Redis answered this replica's last calls: in
// Strict, not in Unavailable.
func (l *Ledger) Reachable() bool { return l.State() != admission.Unavailable }

// HearsAllSince returns since when this replica hears every periodic
// entry of the permits it holds: since it last became strict, or now while
// it is not. While Redis does not answer, a replica's access-log streams
// are closed (Envoy sends its entries to other replicas) and the entries
// that reach another replica cannot be forwarded to it, so a permit it
// held across an outage may have run with periodic entries it never
// heard: no evidence that its Envoy sends none (accesslog's silent nodes).
func (l *Ledger) HearsAllSince() time.Time {
	if l.State() != admission.Strict {
		return time.Now()
	}
	return time.Unix(0, l.strictAt.Load())
}

// Replicas returns the number of live replicas Redis last reported (at
// least 1).
func (l *Ledger) Replicas() int { return int(l.replicas.Load()) }

// unavailable records that a call with the whole timeout failed: the
// first failure in Strict switches to Unavailable and is logged.
func (l *Ledger) unavailable(op admission.Op, err error) {
	if l.state.CompareAndSwap(int32(admission.Strict), int32(admission.Unavailable)) {
		l.log.Error("redis ledger unavailable: applying ledger.on_unavailable until Redis answers again",
			"op", op, "err", err)
		l.rec.LedgerState(admission.Unavailable)
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// Run keeps the ledger going until ctx ends: it listens for wake-ups of
// this replica's waiters, says each Tick that the replica is alive (the
// live count, Replicas), looks at each bulkhead of names (expiry, the
// queue, the global counts), and moves between states.
func (l *Ledger) Run(ctx context.Context, names func() []string) error {
	var g errgroup.Group
	g.Go(func() error { return l.listen(ctx) })
	g.Go(func() error { return l.batch(ctx) })
	g.Go(func() error { return l.tickLoop(ctx, names) })
	return g.Wait()
}

// listen delivers the wake-ups of this replica's waiters. go-redis
// resubscribes after a broken connection; a wake-up sent meanwhile is lost
// and its waiter learns its fate when its wait ends (leave).
func (l *Ledger) listen(ctx context.Context) error {
	ps := l.rdb.Subscribe(ctx, l.cfg.Prefix+"wake:"+l.cfg.Replica)
	defer ps.Close()
	ch := ps.Channel(redis.WithChannelSize(1024))
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			if len(m.Payload) > 1 && l.lease != nil {
				switch msg := wakeMsg(m.Payload[0]); msg {
				case wakeRecall:
					l.lease.recall(m.Payload[1:])
					continue
				case wakeEnded, wakeHeartbeat:
					if name, token, ok := strings.Cut(m.Payload[1:], "\n"); ok {
						l.lease.forwarded(msg == wakeEnded, name, token)
					}
					continue
				}
			}
			l.wake.deliver(m.Payload)
		}
	}
}

func (l *Ledger) tickLoop(ctx context.Context, names func() []string) error {
	for {
		l.tick(ctx, names)
		d := l.cfg.Tick
		if l.State() != admission.Strict {
			d /= 4
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-l.kick:
			t.Stop()
		case <-t.C:
		}
	}
}

// replicaStale is how long a replica that stopped saying it is alive still
// counts, in ticks.
const replicaStale = 3

// stillDownEvery bounds how often a replica whose Redis does not answer
// says so again in its log.
const stillDownEvery = 30 * time.Second

func (l *Ledger) tick(ctx context.Context, names func() []string) {
	res, err := l.call(ctx, time.Time{}, admission.OpReplicas, l.sc.replicas, []string{l.cfg.Prefix + "replicas"},
		l.cfg.Replica, ms(replicaStale*l.cfg.Tick))
	if err != nil {
		if ctx.Err() == nil && time.Since(l.downLogged) >= stillDownEvery {
			l.downLogged = time.Now()
			l.log.Error("redis ledger unavailable: ledger.on_unavailable applies until Redis answers", "err", err)
		}
		return
	}
	l.downLogged = time.Time{}
	l.checkRunID(ctx, names)
	if n, _ := res.(int64); n > 0 {
		l.replicas.Store(int32(n))
		l.rec.LedgerReplicas(int(n))
	}
	if l.state.CompareAndSwap(int32(admission.Unavailable), int32(admission.Strict)) {
		l.strictAt.Store(time.Now().UnixNano())
		l.rec.LedgerState(admission.Strict)
		l.log.Info("redis ledger strict: redis answers")
		// Whatever happened meanwhile (other replicas' grants, a Redis
		// that lost its state) is seen at the next looks, of every
		// bulkhead.
		l.calm.stirAll()
	}
	if names != nil {
		l.look(ctx, l.calm.due(names())...)
	}
}

// stateArgs are the state script's arguments.
func (l *Ledger) stateArgs() []any {
	return []any{ms(l.cfg.Recovery), ms(l.cfg.adopt())}
}

// look runs the state script of each bulkhead, pipelined: it reclaims
// expired leases, serves queues (a recovery window that ended, permits
// that expired) and keeps the global counts (Global). Its time limit is four
// timeouts, cut to ctx's deadline: a waiter looks with its Check's context,
// so a slow Redis does not hold that Check past its deadline, and a look
// that ctx ended (that deadline, or the Check gone) is no sign of Redis.
func (l *Ledger) look(ctx context.Context, names ...string) {
	if len(names) == 0 {
		return
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout*4)
	defer cancel()
	deadline, _ := ctx.Deadline()
	cut := cutBy(deadline, start, l.cfg.Timeout*4)
	runs := make([]scriptRun, len(names))
	for i, n := range names {
		runs[i] = scriptRun{keys: l.keysOf(n), args: l.stateArgs()}
	}
	gens := l.calm.gens(names)
	cmds := l.pipeRuns(cctx, l.sc.state, runs)
	err := firstErr(cmds)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A Redis that restarted, or a new master: load and look again.
		err = l.sc.state.Load(cctx, l.rdb).Err()
		if err == nil {
			cmds = l.pipeRuns(cctx, l.sc.state, runs)
			err = firstErr(cmds)
		}
	}
	if err != nil && (ctx.Err() != nil || passed(cut)) {
		l.rec.LedgerCall(admission.OpState, time.Since(start), fmt.Errorf("%w: %s: %w", ErrCallerDeadline, admission.OpState, err))
		return
	}
	l.rec.LedgerCall(admission.OpState, time.Since(start), err)
	if err != nil {
		l.unavailable(admission.OpState, err)
		return
	}
	for i, c := range cmds {
		a, _ := c.Val().([]any)
		if len(a) < 8 {
			continue
		}
		n := func(i int) int { v, _ := a[i].(int64); return int(v) }
		swept, _ := a[2].([]any)
		redisNow, _ := a[4].(int64)
		l.expired(names[i], swept, redisNow)
		l.setGlobal(names[i], admission.Global{InUse: n(0), Queued: [3]int{n(5), n(6), n(7)}, Recovering: n(3) > 0})
		// Calm: nothing per request in use or waiting, no recovery,
		// nothing expired (an older script's answer has no 9th element:
		// never calm).
		quiet := len(a) >= 9 && n(8) == 0 && n(1) == 0 && n(3) == 0 && len(swept) == 0
		l.calm.looked(names[i], gens[i], quiet)
	}
}

// checkRunID notices a Redis that restarted or failed over (the run id of
// a master it knew is gone): asynchronous replication may have lost the
// last grants, so every bulkhead pauses admissions for the recovery window
// while the running requests' heartbeats adopt what Redis forgot. With a
// cluster, each master's run id counts.
func (l *Ledger) checkRunID(ctx context.Context, names func() []string) {
	ids, err := l.runIDs(ctx)
	if err != nil || len(ids) == 0 {
		return
	}
	prev := l.masters
	l.masters = ids
	if len(prev) == 0 || names == nil {
		return
	}
	var gone []string
	for id := range prev {
		if !ids[id] {
			gone = append(gone, id)
		}
	}
	if len(gone) == 0 {
		return
	}
	l.log.Warn("redis restarted or failed over (a master's run id is gone): it may have lost the last grants; "+
		"every bulkhead pauses admissions for the recovery window while heartbeats adopt the running requests",
		"gone_run_ids", gone)
	l.calm.stirAll()
	for _, n := range names() {
		_, _ = l.call(ctx, time.Time{}, admission.OpReopen, l.sc.reopen, l.keysOf(n), ms(l.cfg.Recovery), ms(l.cfg.adopt()))
	}
}

// runIDs returns the run ids of the masters serving the ledger.
func (l *Ledger) runIDs(ctx context.Context) (map[string]bool, error) {
	ids := map[string]bool{}
	var mu sync.Mutex
	add := func(c *redis.Client) error {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(line, "run_id:"); ok {
				mu.Lock()
				ids[strings.TrimSpace(v)] = true
				mu.Unlock()
			}
		}
		return nil
	}
	switch c := l.rdb.(type) {
	case *redis.ClusterClient:
		return ids, c.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error { return add(n) })
	case *redis.Client:
		return ids, add(c)
	default:
		return nil, nil
	}
}
