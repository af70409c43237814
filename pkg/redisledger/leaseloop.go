package redisledger

import (
	"context"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// Run keeps this replica's capacity leases until ctx ends, then gives them
// back: each Tick, and soon after a kick (a permit to give back, a recall),
// it calls the lease script for each configured bulkhead of reg and sizes
// the local limiter to the answer. It does not run the ledger (the
// Fallback's Run does).
func (c *Capacity) Run(ctx context.Context, reg *bulkhead.Registry) error {
	defer c.giveBack(reg)
	tick := c.ledger.cfg.Tick
	for {
		start := time.Now()
		c.round(ctx, reg)
		t := time.NewTimer(tick)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-c.kick:
			t.Stop()
			// At most one round each Tick/renewGapDivisor.
			if wait := tick/renewGapDivisor - time.Since(start); wait > 0 {
				gap := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					gap.Stop()
					return nil
				case <-gap.C:
				}
			}
		case <-t.C:
		}
	}
}

// round renews the lease of every bulkhead of reg, and gives back those of
// bulkheads no longer configured. A bulkhead with tenant compartments, or
// in a dry run, holds no lease: its admissions are per request. A lease
// that is given back is parked: no call until a Check finds it wanting.
func (c *Capacity) round(ctx context.Context, reg *bulkhead.Registry) {
	for _, name := range reg.Keys() {
		lim := reg.Get(name)
		if lim == nil {
			continue
		}
		s := lim.Settings()
		holdsNone := reg.Tenants(name) != nil || s.DryRun
		leaving := holdsNone
		// The peak since the last round, taken once: a second pass reports
		// the same demand (the peak of its few milliseconds would shrink
		// the lease it just grew).
		peak := c.takePeak(name)
		ls := c.lease(name)
		if c.park(ls, name, &leaving, peak) {
			continue
		}
		moving := make(chan struct{})
		ls.moving.Store(&moving)
		for range maxPasses {
			if !c.renew(ctx, name, s, leaving, peak) {
				break
			}
		}
		ls.parked.Store(leaving && ls.held.Load() == 0)
		ls.moving.Store(nil)
		close(moving)
		if !holdsNone && ls.parked.Load() && ls.overflow.Load() > 0 {
			// A Check found no room while the lease was being given back,
			// before it was parked (so it did not wake the loop): the lease
			// is wanted again.
			c.wake()
		}
	}
	c.held.Range(func(k, v any) bool {
		if name, ls := k.(string), v.(*capLease); reg.Get(name) == nil {
			leaving := true
			if !c.park(ls, name, &leaving, c.takePeak(name)) {
				c.renew(ctx, name, c.want[name], true, 0)
				ls.parked.Store(ls.held.Load() == 0)
			}
		}
		return true
	})
}

// idleRounds is how many rounds a lease stays granted with nothing of it in
// use and no Check wanting it before it is given back (parked).
const idleRounds = 10

// park decides whether this round calls Redis for bulkhead name's lease ls
// (peak: the most in use since the last round; leaving: its target is 0,
// which park sets once the lease has been idle for idleRounds rounds). It
// reports true to skip the call: the lease is parked (given back) and
// nothing of it is in use here, and, unless it is leaving, no Check found
// it wanting since. A quiet bulkhead (or one that holds no lease: tenants,
// a dry run) thus costs Redis nothing, where a held lease costs a call
// each tick per replica; its first Checks after a quiet spell take the
// per-request path until the round the first of them wakes (wake) grants a
// lease, one Redis call later.
func (c *Capacity) park(ls *capLease, name string, leaving *bool, peak int) bool {
	_, used := c.localState(name)
	if *leaving {
		return ls.parked.Load() && used == 0
	}
	if peak > 0 || used > 0 || ls.overflow.Load() > 0 || ls.waiters.Load() {
		ls.idle = 0
		ls.parked.Store(false)
		return false
	}
	if ls.parked.Load() {
		return true
	}
	ls.idle++
	if ls.idle >= c.idleRounds {
		*leaving = true
	}
	return false
}

// giveBack returns every lease when Run ends: the local limiters stop
// admitting, and Redis keeps counting only the permits still in use.
func (c *Capacity) giveBack(reg *bulkhead.Registry) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*c.ledger.cfg.Timeout)
	defer cancel()
	c.held.Range(func(k, _ any) bool {
		name := k.(string)
		s := c.want[name]
		if lim := reg.Get(name); lim != nil {
			s = lim.Settings()
		}
		c.renew(ctx, name, s, true, c.takePeak(name))
		return true
	})
}

// renew makes one call of the lease script for bulkhead name (settings s;
// leaving: target 0; peak: the most in use since the round before) and
// applies the answer; it reports whether a second call would give
// something back now (a shrink's second step, or a lost lease's new epoch).
func (c *Capacity) renew(ctx context.Context, name string, s bulkhead.Settings, leaving bool, peak int) bool {
	ls := c.lease(name)
	if ls.epoch == 0 {
		ls.epoch = 1
	}
	if ls.waiters.Load() || leaving {
		// Waiters in Redis's queue (or a bulkhead that holds no lease): the
		// idle part of the lease goes back in this very call.
		c.setLocal(name, c.inUse(name), s)
	}
	size, used := c.localState(name)
	peak = max(peak, used)
	need := max(size, used)
	ls.seq++
	sent := c.clock.Now()
	over := ls.overflow.Swap(0)
	res, err := c.ledger.call(ctx, time.Time{}, admission.OpLease, c.ledger.sc.lease, c.ledger.keysOf(name),
		c.ledger.cfg.Replica, ls.epoch, ls.seq, need, used, peak, over, s.MaxConcurrent, ms(c.ttl),
		ms(c.ledger.cfg.Recovery), ms(c.ledger.cfg.adopt()), boolArg(leaving), smallestLease(s))
	if err != nil {
		// The lease stands until its end by this replica's clock (live);
		// the demand goes with the next call.
		ls.overflow.Add(over)
		return false
	}
	a, _ := res.([]any)
	if len(a) < 6 { // LEASE_STALE and LEASE_LOST answer 6, LEASE_HELD 7
		c.ledger.log.Warn("capacity lease: the lease script's answer is malformed", "bulkhead", name, "answer", res)
		return false
	}
	n := func(i int) int64 {
		if i < len(a) {
			v, _ := a[i].(int64)
			return v
		}
		return 0
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
		c.setLocal(name, 0, s)
		return true
	case leaseHeld:
		target, held := n(1), n(2)
		end := sent.Add(time.Duration(n(3))*time.Millisecond - c.margin)
		ls.end.Store(int64(end.Sub(c.base)))
		ls.target.Store(target)
		ls.held.Store(held)
		ls.waiters.Store(n(6) > 0)
		c.setLocal(name, int(target), s)
		return held > max(target, int64(c.inUse(name)))
	}
	return false // leaseStale: an older call's answer; nothing changed
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// setLocal sizes the local limiter of bulkhead name to k permits (settings
// s otherwise, fail fast: a request the lease has no room for takes the
// per-request path at once). A limiter is created at its first k >= 1 and
// kept: at k = 0 it is paused, so that the permits it has in use stay
// counted by the next call (need).
func (c *Capacity) setLocal(name string, k int, s bulkhead.Settings) {
	s.MaxConcurrent, s.MaxQueue, s.MaxWait = max(k, 1), 0, 0
	s.DryRun, s.Queue, s.CoDelTarget, s.CoDelInterval = false, bulkhead.FIFO, 0, 0
	lim := c.local.Get(name)
	if lim == nil {
		if k == 0 {
			return
		}
		c.want[name] = s
		if _, err := c.local.Apply(c.want); err != nil {
			delete(c.want, name)
			c.ledger.log.Warn("capacity lease not applied: its bulkhead's settings are invalid", "bulkhead", name, "err", err)
		}
		return
	}
	if k == 0 {
		lim.SetPaused(true)
	}
	if c.want[name] != s {
		c.want[name] = s
		if err := lim.Resize(s); err != nil {
			c.ledger.log.Warn("capacity lease not applied: its bulkhead's settings are invalid", "bulkhead", name, "err", err)
		}
	}
	if k > 0 {
		lim.SetPaused(false)
	}
}

// localState returns the local limiter of bulkhead name's limit (0 while
// paused or absent) and its permits in use.
func (c *Capacity) localState(name string) (size, used int) {
	lim := c.local.Get(name)
	if lim == nil {
		return 0, 0
	}
	snap := lim.Snapshot()
	if !snap.Paused {
		size = snap.Settings.MaxConcurrent
	}
	return size, snap.InUse
}

// takePeak returns the most permits the local limiter of bulkhead name had
// in use since it was last asked.
func (c *Capacity) takePeak(name string) int {
	if lim := c.local.Get(name); lim != nil {
		return lim.TakePeak()
	}
	return 0
}

// smallestLease is the smallest lease a limiter with settings s can use:
// its reserves leave a best_effort permit in it (bulkhead.Settings.Validate).
// A smaller lease would hold capacity that only some classes may use, and
// Redis counts a lease whole: the script grants none rather than that.
func smallestLease(s bulkhead.Settings) int {
	ok := func(k int) bool {
		t := s
		t.MaxConcurrent, t.MaxQueue, t.MaxWait, t.DryRun, t.Queue, t.CoDelTarget, t.CoDelInterval = k, 0, 0, false, bulkhead.FIFO, 0, 0
		return t.Validate() == nil
	}
	// k less its reserves never falls as k grows: the first k that holds a
	// best_effort permit, by bisection.
	lo, hi := 1, max(s.MaxConcurrent, 1)
	for lo < hi {
		if mid := lo + (hi-lo)/2; ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
