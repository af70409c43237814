package redisledger

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// The lease script's batches (scripts/lease.lua).
const (
	// leaseBatch bounds the bulkheads of one lease call, so that one script
	// never holds Redis long: a round of more bulkheads sends one call per
	// leaseBatch of them, in one round trip (docs/redis.md, "One call per
	// round", has the measured run time of a full batch: 2.4 ms).
	leaseBatch = 64
	// leaseArgs is how many arguments the lease script takes per bulkhead
	// (LEASE_ARGS in lease.lua), after leaseHead shared ones.
	leaseArgs = 10
	leaseHead = 4
)

// renewal is one bulkhead's part in a round of the lease loop: up to
// maxPasses calls of the lease script (once, for a lease given back because
// its bulkhead is gone or the replica stops), and what the one under way
// carries. The lease loop's alone.
type renewal struct {
	name    string
	ls      *capLease
	s       bulkhead.Settings
	leaving bool // target 0
	peak    int  // the most in use since the round before, taken once
	once    bool // one call, whatever its answer
	// holdsNone: a bulkhead with tenants or in a dry run (it only gives
	// back); gone: no longer configured (once). moving is the channel the
	// round opened for the bulkhead (nil: none).
	holdsNone, gone bool
	moving          *chan struct{}

	// The call under way (prepare): its arguments after the shared ones,
	// and the overflow it reports (taken from the lease, given back to it
	// if the call fails). again: the last answer asks for another call.
	args  [leaseArgs]any
	over  int64
	keep  time.Duration
	again bool
}

// leaseAnswer is what Redis answered for one bulkhead of a lease call: its
// part of the answer (nil if malformed), or the call's error.
type leaseAnswer struct {
	a   []any
	err error
}

// renewAll makes the lease calls of rs: every one's first call, then the
// second (and third) of those whose answer asks for it, each pass in as
// few Redis calls as it takes (one per leaseBatch bulkheads, in one round
// trip; per bulkhead on a Redis Cluster, pipelined), and applies the
// answers. Each renewal is finished (finish) once it has had its calls.
func (c *Capacity) renewAll(ctx context.Context, rs []*renewal) {
	for pass := range maxPasses {
		due := rs[:0:0]
		for _, r := range rs {
			if pass == 0 || (r.again && !r.once) {
				due = append(due, r)
			}
		}
		if len(due) == 0 {
			return
		}
		for _, r := range due {
			c.prepare(r)
		}
		sent := c.clock.Now()
		answers := c.send(ctx, due)
		for i, r := range due {
			r.again = c.apply(r, sent, answers[i])
			if !r.again || r.once || pass == maxPasses-1 {
				c.finish(r)
			}
		}
	}
}

// prepare readies r's next call: the idle part of the lease goes back in
// it when Redis's queue has waiters or the lease is leaving; it reports
// the lease's need, use, peak and overflow, under the next seq of its
// epoch.
func (c *Capacity) prepare(r *renewal) {
	ls := r.ls
	if ls.epoch == 0 {
		ls.epoch = 1
	}
	if ls.waiters.Load() || r.leaving {
		// Waiters in Redis's queue (or a bulkhead that holds no lease): the
		// idle part of the lease goes back in this very call.
		c.setLocal(r.name, c.inUse(r.name), r.s)
	}
	size, used := c.localState(r.name)
	peak := max(r.peak, used)
	need := max(size, used)
	// Demand (the peak) counts a share's permits as what its Envoys use
	// (Shares); need and used count them all: the lease never falls below
	// what is handed out, and Redis counts them in use, as the in-memory
	// ledger does (its class ceilings, bulkhead_active_calls).
	r.keep = 0
	if h := c.shares.Load(); h != nil {
		r.keep = h.Keep(r.name)
		_, peak = c.shareDemand(h, r.name, used, peak)
	}
	ls.seq++
	ls.sent = r.s
	r.over = ls.overflow.Swap(0)
	r.args = [leaseArgs]any{ls.epoch, ls.seq, need, used, peak, r.over, r.s.MaxConcurrent, boolArg(r.leaving), smallestLease(r.s), ms(r.keep)}
}

// shareDemand returns the permits of bulkhead name's lease in use and its
// peak, with the permits held for shares counted as what their Envoys use
// (h.LeaseUse): otherwise a share's headroom would read as demand, and a
// lease that backs a share of most of it would double at each renewal.
func (c *Capacity) shareDemand(h Shares, name string, used, peak int) (int, int) {
	held, use := h.LeaseUse(name)
	if held == 0 && use == 0 {
		return used, peak
	}
	u := max(0, used-held+use)
	return u, max(u, peak-held+use)
}

// send calls the lease script for rs (prepared) and returns each one's
// answer, in order: one call per leaseBatch of them, all in one round
// trip; on a Redis Cluster, whose bulkheads live in different slots, one
// call per bulkhead, pipelined (the client sends each node its own).
func (c *Capacity) send(ctx context.Context, rs []*renewal) []leaseAnswer {
	l := c.ledger
	per := leaseBatch
	if _, cluster := l.rdb.(*redis.ClusterClient); cluster {
		per = 1
	}
	head := [leaseHead]any{l.cfg.Replica, ms(c.ttl), ms(l.cfg.Recovery), ms(l.cfg.adopt())}
	runs := make([]scriptRun, 0, (len(rs)+per-1)/per)
	for i := 0; i < len(rs); i += per {
		part := rs[i:min(i+per, len(rs))]
		run := scriptRun{keys: make([]string, 0, len(part)*len(keySuffixes)), args: make([]any, 0, leaseHead+len(part)*leaseArgs)}
		run.args = append(run.args, head[:]...)
		for _, r := range part {
			run.keys = append(run.keys, l.keysOf(r.name)...)
			run.args = append(run.args, r.args[:]...)
		}
		runs = append(runs, run)
	}
	answers := make([]leaseAnswer, len(rs))
	for k, res := range l.callAll(ctx, admission.OpLease, l.sc.lease, runs) {
		part := answers[k*per : min((k+1)*per, len(rs))]
		if res.err != nil {
			for j := range part {
				part[j].err = res.err
			}
			continue
		}
		// One answer per bulkhead; a short or malformed one loses only its
		// own bulkheads' (nil: malformed, apply says so).
		a, _ := res.val.([]any)
		for j := range part {
			if j < len(a) {
				part[j].a, _ = a[j].([]any)
			}
		}
	}
	return answers
}

// apply applies the answer to r's call, sent at sent by this replica's
// clock, and reports whether another call would give something back now
// (a shrink's second step, or a lost lease's new epoch). A failed call, or
// an answer that does not say what Redis did, changes nothing here: the
// lease stands until its end by this replica's clock (live), and the
// demand goes with the next call.
func (c *Capacity) apply(r *renewal, sent time.Time, ans leaseAnswer) bool {
	name, ls, a := r.name, r.ls, ans.a
	if ans.err != nil {
		ls.overflow.Add(r.over)
		return false
	}
	n := func(i int) int64 {
		if i < len(a) {
			v, _ := a[i].(int64)
			return v
		}
		return 0
	}
	if n(0) == leaseFailed {
		c.ledger.log.Warn("capacity lease: the lease script failed for this bulkhead", "bulkhead", name, "err", a[1:])
		ls.overflow.Add(r.over)
		return false
	}
	if len(a) < 6 { // LEASE_STALE and LEASE_LOST answer 6, LEASE_HELD 7 or 10
		c.ledger.log.Warn("capacity lease: the lease script's answer is malformed", "bulkhead", name, "answer", a)
		ls.overflow.Add(r.over)
		return false
	}
	if swept, _ := a[4].([]any); len(swept) > 0 {
		c.ledger.expired(name, swept, n(5))
	}
	switch n(0) {
	case leaseLost:
		// Its end passed at Redis (or Redis lost it): a new epoch, from
		// what is in use here.
		ls.epoch, ls.seq = ls.epoch+1, 0
		ls.end.Store(0)
		ls.backing.Store(nil)
		ls.far.Store(false)
		c.setLocal(name, 0, r.s)
		return true
	case leaseHeld:
		target, held := n(1), n(2)
		life := time.Duration(n(3)) * time.Millisecond
		end := sent.Add(life - life/driftDivisor)
		ls.far.Store(len(a) >= 11 && n(10) == 1)
		ls.end.Store(int64(end.Sub(c.base)))
		ls.backing.Store(&backing{end: int64(end.Sub(c.base)), keep: r.keep})
		ls.target.Store(target)
		ls.held.Store(held)
		ls.waiters.Store(n(6) > 0)
		if len(a) >= 10 {
			c.ledger.leased(name, n(7), n(8), n(6), n(9))
		}
		c.setLocal(name, int(target), r.s)
		return held > max(target, int64(c.inUse(name)))
	}
	return false // leaseStale: an older call's answer; nothing changed
}

// finish ends r's part in the round once it has had its calls: a lease
// given back is parked, the permits are no longer in transit (moving), and
// a Check that found no room while the lease was being given back wakes
// the loop again.
func (c *Capacity) finish(r *renewal) {
	ls := r.ls
	if r.gone {
		ls.parked.Store(ls.held.Load() == 0)
	}
	if r.moving == nil {
		return
	}
	ls.parked.Store(r.leaving && ls.held.Load() == 0)
	ls.moving.Store(nil)
	close(*r.moving)
	if !r.holdsNone && ls.parked.Load() && ls.overflow.Load() > 0 {
		// A Check found no room while the lease was being given back,
		// before it was parked (so it did not wake the loop): the lease
		// is wanted again.
		c.wake()
	}
}
