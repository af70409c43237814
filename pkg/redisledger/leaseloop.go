package redisledger

import (
	"context"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// Run keeps this replica's capacity leases until ctx ends, then gives them
// back: each Tick, and soon after a kick (a permit to give back, a recall),
// it renews the lease of each configured bulkhead of reg, all in one round
// of calls (round), and sizes the local limiters to the answers. It does
// not run the ledger (the Fallback's Run does).
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
// bulkheads no longer configured, in as few Redis calls as it takes
// (renewAll: one per leaseBatch bulkheads, in one round trip). A bulkhead
// with tenant compartments, or in a dry run, holds no lease: its
// admissions are per request. A lease that is given back is parked: no
// call until a Check finds it wanting.
func (c *Capacity) round(ctx context.Context, reg *bulkhead.Registry) {
	var due []*renewal
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
		if c.steady(ls, name, s, leaving, peak) {
			ls.skipped = max(ls.skipped, peak)
			continue
		}
		peak, ls.skipped = max(peak, ls.skipped), 0
		moving := make(chan struct{})
		ls.moving.Store(&moving)
		due = append(due, &renewal{name: name, ls: ls, s: s, leaving: leaving, peak: peak, holdsNone: holdsNone, moving: &moving})
	}
	c.held.Range(func(k, v any) bool {
		if name, ls := k.(string), v.(*capLease); reg.Get(name) == nil {
			leaving := true
			if !c.park(ls, name, &leaving, c.takePeak(name)) {
				due = append(due, &renewal{name: name, ls: ls, s: c.want[name], leaving: true, once: true, gone: true})
			}
		}
		return true
	})
	c.renewAll(ctx, due)
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

// steady reports whether this round may skip the call for bulkhead name's
// lease ls (settings s, peak: the most in use since the last round): Redis
// granted it far from the limit, for longer (lease.lua's FAR_LEASE), and
// by this replica's clock it has more than a whole ordinary lease (c.ttl)
// still to run, so that a round later it is still live with time for its
// call; and nothing asks for a call: the settings are those the last
// call sent, the lease is not leaving, nothing of it waits to go back,
// Redis's queue had no waiter (a recall sets it), no Check found it full
// (overflow), and the most in use since the last call is at most half the
// target (the lease covers twice its replica's demand far from the
// limit, so more means demand grew). Far from the limit a lease is thus
// renewed every leaseTicks ticks while its demand holds, not each tick: a
// third of the lease calls' Redis CPU (docs/redis.md, "Calm bulkheads, and
// far from the limit, renewed rarely"). The cost: a replica that dies
// holds its far lease's capacity for up to twice as long (6 ticks), while
// the bulkhead is far from its limit.
func (c *Capacity) steady(ls *capLease, name string, s bulkhead.Settings, leaving bool, peak int) bool {
	if c.eachRound || !ls.far.Load() || leaving || ls.sent != s || ls.waiters.Load() || ls.overflow.Load() > 0 {
		return false
	}
	target := ls.target.Load()
	if ls.held.Load() != target || ls.moving.Load() != nil {
		return false
	}
	if left := time.Duration(ls.end.Load()) - c.clock.Now().Sub(c.base); left <= c.ttl {
		return false
	}
	_, used := c.localState(name)
	peak = max(peak, ls.skipped)
	if h := c.shares.Load(); h != nil {
		used, peak = c.shareDemand(h, name, used, peak)
	}
	return 2*int64(max(peak, used)) <= target
}

// giveBack returns every lease when Run ends, in one round of calls: the
// local limiters stop admitting, and Redis keeps counting only the permits
// still in use.
func (c *Capacity) giveBack(reg *bulkhead.Registry) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*c.ledger.cfg.Timeout)
	defer cancel()
	var due []*renewal
	c.held.Range(func(k, v any) bool {
		name := k.(string)
		s := c.want[name]
		if lim := reg.Get(name); lim != nil {
			s = lim.Settings()
		}
		due = append(due, &renewal{name: name, ls: v.(*capLease), s: s, leaving: true, peak: c.takePeak(name), once: true})
		return true
	})
	c.renewAll(ctx, due)
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
