package redisledger

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// The capacity leases' timing (doc.go, "Capacity leases").
const (
	// leaseTicks is a capacity lease's length in ticks: renewed each tick,
	// it outlives two lost renewals. Far from the limit Redis grants twice
	// that (lease.lua's FAR_LEASE), renewed each leaseTicks ticks while
	// the replica's demand holds (steady).
	leaseTicks = 3
	// driftDivisor sets the drift margin: a replica stops admitting from
	// its lease its length/driftDivisor (1%) before its end by its own
	// monotonic clock, twenty times the largest rate error NTP lets a
	// clock have (500 ppm).
	driftDivisor = 100
	// renewGapDivisor bounds how often a give-back or a recall can make the
	// lease loop call Redis: at most each Tick/renewGapDivisor.
	renewGapDivisor = 20
	// maxPasses bounds the calls of one round for one bulkhead (a shrink is
	// two: the new target, then the give-back).
	maxPasses = 3
)

// Capacity is the Redis ledger with capacity leases (ledger.redis.
// capacity_leases): this replica holds, per bulkhead, a lease of permits
// that Redis counts in use, and admits from it alone, with an in-process
// limiter sized to the lease (an admission.Memory over a registry whose
// limits follow the leases). What the lease has no room for, and every
// request of a tenant, takes the per-request path: next, the Fallback
// (Redis's scripts and global queue, under the unavailable policy).
// Releases and renewals of the permits admitted from a lease are served
// here; the others go on to next. Safe for concurrent use; Run owns the
// lease loop.
type Capacity struct {
	ledger *Ledger
	next   admission.Ledger
	leases *permit.Memory
	local  *bulkhead.Registry
	mem    *admission.Memory
	clock  clock.Clock
	base   time.Time // the lease ends are kept as durations since base
	ttl    time.Duration
	held   sync.Map // bulkhead name -> *capLease
	kick   chan struct{}
	// idleRounds: see the constant (tests shorten it).
	idleRounds int
	// eachRound: renew every lease each round, steady or not (the tests
	// of the rounds' calls).
	eachRound bool

	// want is the local registry's settings (the lease loop's only).
	want map[string]bulkhead.Settings
	// shares hands the leases' permits to Envoys as shares (nil: none).
	shares atomic.Pointer[sharesHolder]
}

// Shares is what hands a lease's permits to Envoys as shares (package
// shares' Manager over Local): an Envoy's circuit breaker admits within
// its share with no word to this replica, and may go on doing so for
// Keep after the replica's last word (its runtime layer's TTL, then its
// share route's timeout). So every lease call of a bulkhead that may back
// shares asks Redis to keep the lease counted that much longer than the
// replica admits from it (lease.lua's keep), and the lease's demand (its
// peak) counts its shares as what their Envoys use (LeaseUse), not as the
// capacity handed out: a share's idle headroom is no demand. Its permits
// in use count them whole.
type Shares interface {
	// Keep is how long after the replica's last word an Envoy may use a
	// share of bulkhead name: 0 when the bulkhead hands out none and
	// holds none.
	Keep(name string) time.Duration
	// LeaseUse returns the permits held for bulkhead name's shares and
	// what their Envoys use of them (in flight, and what their circuit
	// breakers turned away).
	LeaseUse(name string) (held, used int)
}

type sharesHolder struct{ Shares }

// SetShares makes s the holder of shares over the leases (Local); call it
// before the lease loop hands any out (Backs says whether it may).
func (c *Capacity) SetShares(s Shares) { c.shares.Store(&sharesHolder{s}) }

// Local is the registry of the limiters sized to the leases, from which
// shares are held (package shares' Limiters).
func (c *Capacity) Local() *bulkhead.Registry { return c.local }

// Backs reports whether the lease of bulkhead name may back shares now:
// it is live by this replica's clock, and the call that set its end asked
// Redis to keep it at least keep after that end. A share pushed before the
// end is then counted in Redis until the Envoy can no longer use it,
// whether or not this replica ever speaks again.
func (c *Capacity) Backs(name string, keep time.Duration) bool {
	v, ok := c.held.Load(name)
	if !ok {
		return false
	}
	b := v.(*capLease).backing.Load()
	return b != nil && int64(c.clock.Now().Sub(c.base)) < b.end && b.keep >= keep
}

// backing is a lease's end (since Capacity.base, as capLease.end) and how
// long after it Redis keeps the lease.
type backing struct {
	end  int64
	keep time.Duration
}

// Far reports whether Redis granted bulkhead name's lease far from the
// limit at its last call (lease.lua: no waiter, no recovery window, and
// the mesh's demand at most half the limit), and the lease is live.
func (c *Capacity) Far(name string) bool {
	v, ok := c.held.Load(name)
	if !ok {
		return false
	}
	ls := v.(*capLease)
	return ls.far.Load() && c.live(ls)
}

// capLease is this replica's capacity lease of one bulkhead.
type capLease struct {
	// end is when this replica stops admitting from the lease, since
	// Capacity.base on its clock (0: never held).
	end atomic.Int64
	// target is the local limit; held what Redis counts (>= target).
	target, held atomic.Int64
	// backing is the end the last answer set and the keep (lease.lua) of
	// its call, together (Backs).
	backing atomic.Pointer[backing]
	// overflow counts the admissions the lease had no room for since the
	// last call (demand, reported with it).
	overflow atomic.Int64
	// waiters: Redis's queue had waiters at the last call, so permits
	// freed here go back at once.
	waiters atomic.Bool
	// epoch and seq number the calls (lease loop only).
	epoch, seq int64
	// far: the last answer granted the lease far from the limit, for
	// longer (lease.lua's FAR_LEASE); set by the lease loop, read by the
	// shares (Far) too.
	far atomic.Bool
	// sent: the settings the last call reported; skipped: the most in use
	// over the rounds that skipped their call since (steady). The lease
	// loop's only.
	sent    bulkhead.Settings
	skipped int
	// idle counts the rounds in a row with nothing of the lease in use and
	// no Check wanting it (lease loop only, park); parked: given back for
	// that (or never wanted), no call until a Check wants it (set by the
	// lease loop, read by Checks: the first one that finds it wanting
	// kicks the loop).
	idle   int
	parked atomic.Bool
	// moving is open while the lease loop's calls for this bulkhead run,
	// closed when they end (nil between rounds): while it is open, permits
	// may be in transit, counted by Redis but not yet in the local limit
	// (a grant not yet applied) or out of the local limit but not yet back
	// in Redis (a shrink before its give-back).
	moving atomic.Pointer[chan struct{}]
}

var _ admission.Ledger = (*Capacity)(nil)

// CapacityOption configures a Capacity.
type CapacityOption func(*Capacity)

// WithCapacityClock sets the clock the lease ends are measured on
// (default: real, monotonic).
func WithCapacityClock(c clock.Clock) CapacityOption { return func(cp *Capacity) { cp.clock = c } }

// NewCapacity returns the capacity-lease backend over l: next is l under
// its unavailable policy (the per-request path), leases keeps the permits
// admitted from the leases (its owner sweeps it). It installs the hook
// through which l's per-request acquires count the lease's permits in use;
// build it before l serves.
func NewCapacity(l *Ledger, next admission.Ledger, leases *permit.Memory, opts ...CapacityOption) *Capacity {
	c := &Capacity{ledger: l, next: next, leases: leases, local: bulkhead.NewRegistry(), clock: clock.Real{},
		kick: make(chan struct{}, 1), idleRounds: idleRounds, want: map[string]bulkhead.Settings{}}
	for _, o := range opts {
		o(c)
	}
	c.base = c.clock.Now()
	c.ttl = leaseTicks * l.cfg.Tick
	// No adoption of unknown tokens here: those are Redis's (Renew).
	c.mem = admission.NewMemory(c.local, leases, permit.Heartbeat{Interval: l.cfg.Heartbeat.Interval, TTL: l.cfg.Heartbeat.TTL},
		admission.WithClock(c.clock))
	l.inLease, l.lease = c.inUse, c
	// Redis tells this replica's permits by their tag: it forwards their
	// entries here rather than adopting them (renew.lua).
	leases.TagTokens(permit.TagOf(l.cfg.Replica))
	// While Redis is out of reach, so are the entries other replicas
	// forward: a permit of a lease that hears nothing then may still run,
	// and expiring it would free its slot in a lease that still admits
	// (until the lease's end here, up to a lease after the last renewal,
	// later than a permit whose last forwarded heartbeat came an interval
	// before the cut expires). Expiries wait until Redis answers again.
	leases.HoldExpiries(func() bool { return l.State() != admission.Strict })
	return c
}

// recall makes the lease of bulkhead name give back its unused permits at
// the lease loop's next call, made at once: a waiter queued in Redis while
// they sat idle here. Without it they would go back at the next renewal,
// up to a tick later.
func (c *Capacity) recall(name string) {
	v, ok := c.held.Load(name)
	if !ok {
		return
	}
	v.(*capLease).waiters.Store(true)
	c.wake()
}

// wake kicks the lease loop: its next round starts at once (at most one
// each Tick/renewGapDivisor) instead of at the next tick.
func (c *Capacity) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// inUse is how many permits the lease of bulkhead name has in use.
func (c *Capacity) inUse(name string) int {
	if lim := c.local.Get(name); lim != nil {
		return lim.Snapshot().InUse
	}
	return 0
}

func (c *Capacity) lease(name string) *capLease {
	if v, ok := c.held.Load(name); ok {
		return v.(*capLease)
	}
	v, _ := c.held.LoadOrStore(name, &capLease{})
	return v.(*capLease)
}

// live reports whether this replica may still admit from ls: before its
// end less the drift margin, by its own clock (set so by the last answer).
func (c *Capacity) live(ls *capLease) bool {
	return int64(c.clock.Now().Sub(c.base)) < ls.end.Load()
}

// Admit implements admission.Ledger: from the lease when it has room (no
// Redis call), else the per-request path. A request of a tenant always
// takes the per-request path (a tenant's limit is counted in Redis).
func (c *Capacity) Admit(ctx context.Context, r admission.Request) (admission.Admitted, error) {
	if r.Tenants == nil || r.Tenant == "" {
		if a, ok, err := c.admitLocal(ctx, r); ok {
			return a, err
		}
	}
	return c.next.Admit(ctx, r)
}

// admitLocal admits r from its bulkhead's lease, and reports whether it
// answered (false: the lease had no room, the per-request path decides).
// When the lease loop is moving permits of the lease, it asks the lease
// again once they have landed (settled).
func (c *Capacity) admitLocal(ctx context.Context, r admission.Request) (admission.Admitted, bool, error) {
	v, ok := c.held.Load(r.Bulkhead.Name())
	if !ok {
		return admission.Admitted{}, false, nil
	}
	ls := v.(*capLease)
	if a, answered, err := c.fromLease(ctx, r, ls); answered {
		return a, true, err
	}
	// The first Check a parked lease has no room for wakes the lease loop:
	// the lease is granted again within one call, not at the next tick
	// (until then Checks take the per-request path). Once per quiet spell:
	// the round takes the overflow (a lease that is leaving, for tenants
	// or a dry run, keeps it and is never woken again).
	if ls.overflow.Add(1) == 1 && ls.parked.Load() {
		c.wake()
	}
	if c.settled(ctx, ls) {
		if a, answered, err := c.fromLease(ctx, r, ls); answered {
			return a, true, err
		}
	}
	return admission.Admitted{}, false, nil
}

// fromLease is one try of admitLocal: r admitted by the lease's limiter,
// or refused there (false), or its caller gone while it waited.
func (c *Capacity) fromLease(ctx context.Context, r admission.Request, ls *capLease) (admission.Admitted, bool, error) {
	lim := c.local.Get(r.Bulkhead.Name())
	if lim == nil || !c.live(ls) {
		return admission.Admitted{}, false, nil
	}
	local := r
	local.Bulkhead, local.Tenants, local.Tenant = lim, nil, ""
	a, err := c.mem.Admit(ctx, local)
	switch {
	case err == nil:
		r.Bulkhead.Count(r.Priority, bulkhead.ReasonNone, false)
		return a, true, nil
	case ctx.Err() != nil:
		r.Bulkhead.Count(r.Priority, bulkhead.ReasonNone, true)
		return admission.Admitted{}, true, ctx.Err()
	}
	return admission.Admitted{}, false, nil
}

// settled waits, when the lease loop is moving permits of ls (between
// Redis and the local limit), until it has applied its answers, and
// reports whether it waited: the request the lease had no room for then
// asks the local limit again before the per-request path. Without it a
// request at the limit could be refused while a permit was in transit,
// held by neither side. The wait is bounded by ctx and by one call's
// Timeout, and skipped while Redis is not reachable (the lease loop's
// calls then end only at their Timeout, and nothing is in transit).
func (c *Capacity) settled(ctx context.Context, ls *capLease) bool {
	ch := ls.moving.Load()
	if ch == nil || c.ledger.State() != admission.Strict {
		return false
	}
	t := time.NewTimer(c.ledger.cfg.Timeout)
	defer t.Stop()
	select {
	case <-*ch:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// Release implements admission.Ledger: a permit of a lease is released
// here (its slot is the lease's again), any other by the per-request path.
func (c *Capacity) Release(e admission.Entry, done admission.Done) {
	lease, res := c.leases.Release(e.Token, permit.AccessLog)
	switch res {
	case permit.Released:
		done.Done(lease, res)
		c.freed(lease.Bulkhead)
	case permit.Duplicate:
		done.Done(lease, res)
	case permit.Expired:
		// Reclaimed here; another replica may have adopted it since.
		c.next.Release(e, expiredUnlessKnown{done})
	default:
		c.next.Release(e, done)
	}
}

// freed kicks the lease loop when a permit of bulkhead name's lease came
// back while the lease is to shrink, or while Redis's queue has waiters:
// the permit goes back to Redis at once.
func (c *Capacity) freed(name string) {
	v, ok := c.held.Load(name)
	if !ok {
		return
	}
	ls := v.(*capLease)
	if ls.waiters.Load() || ls.held.Load() > ls.target.Load() {
		c.wake()
	}
}

// forwarded serves an entry of token that reached another replica, which
// Redis does not know: if this replica admitted its permit from its lease,
// the end entry releases it and the periodic one renews it here (or, when
// it expired here, adopts it into the lease). Otherwise it is nothing of
// this replica's (a token whose tag names no lease holder goes to every
// holder).
func (c *Capacity) forwarded(ended bool, name, token string) {
	if ended {
		if lease, res := c.leases.Release(token, permit.AccessLog); res == permit.Released {
			c.freed(lease.Bulkhead)
		}
		return
	}
	if _, res := c.leases.Renew(token, c.ledger.cfg.Heartbeat.TTL); res == permit.Expired {
		// Its request runs (Redis forwards, rather than adopts, the entries
		// of this lease's permits): counted in the lease again, as Renew
		// does.
		if lim := c.local.Get(name); lim != nil {
			c.adopt(lim, admission.Entry{Bulkhead: []byte(name), Token: token})
		}
	}
}

// expiredUnlessKnown answers Expired for a permit whose lease expired here
// and that Redis does not know either (nor, forwarded, another holder).
type expiredUnlessKnown struct{ done admission.Done }

func (d expiredUnlessKnown) Done(l permit.Lease, r permit.Result) {
	if r == permit.Unknown || r == permit.Forwarded {
		r = permit.Expired
	}
	d.done.Done(l, r)
}

// Renew implements admission.Ledger: a permit of a lease is renewed here,
// and adopted here (past the lease, it runs) when its lease expired here;
// any other goes on to the per-request path (Redis renews or adopts it).
func (c *Capacity) Renew(e admission.Entry, done admission.Done) {
	lease, res := c.leases.Renew(e.Token, c.ledger.cfg.Heartbeat.TTL)
	switch res {
	case permit.Renewed:
		done.Done(lease, res)
	case permit.Duplicate:
		done.Done(lease, permit.Late) // ended: nothing runs
	case permit.Expired:
		if lim := c.local.Get(string(e.Bulkhead)); lim != nil {
			done.Done(c.adopt(lim, e))
			return
		}
		c.next.Renew(e, done)
	default:
		c.next.Renew(e, done)
	}
}

// adopt counts e's running request in the lease's limiter again, past its
// limit if need be (the next call to Redis counts it: need).
func (c *Capacity) adopt(lim *bulkhead.Limiter, e admission.Entry) (permit.Lease, permit.Result) {
	p, err := lim.Adopt()
	if err != nil {
		return permit.Lease{}, permit.Unknown
	}
	lease, err := c.leases.Adopt(p, e.Token, permit.Grant{Bulkhead: lim.Name(), Priority: bulkhead.Normal,
		TTL: c.ledger.cfg.Heartbeat.TTL, Node: e.Node})
	switch {
	case errors.Is(err, permit.ErrLive):
		p.Release()
		return lease, permit.Renewed
	case err != nil:
		p.Release()
		return permit.Lease{}, permit.Unknown
	}
	return lease, permit.AdoptedExpired
}

// EachLease calls each for every bulkhead this replica has held a lease
// of: the permits it may admit from alone now (0 once the lease's end
// passed here, by its clock), those in use, and the Checks admitted from
// it (metrics.CapacitySource).
func (c *Capacity) EachLease(each func(name string, permits, inUse int, admitted uint64)) {
	c.held.Range(func(k, v any) bool {
		name, ls := k.(string), v.(*capLease)
		permits, inUse, admitted := 0, 0, uint64(0)
		if c.live(ls) {
			permits = int(ls.target.Load())
		}
		if lim := c.local.Get(name); lim != nil {
			snap := lim.Snapshot()
			inUse = snap.InUse
			for _, n := range snap.Admitted {
				admitted += n
			}
		}
		each(name, permits, inUse, admitted)
		return true
	})
}

// Holders implements admission.Ledger: the permits of this replica's
// lease and Redis's per-request ones, oldest first.
func (c *Capacity) Holders(name string, max int) ([]permit.Lease, int) {
	local, n := c.leases.Holders(name, max)
	shared, m := c.ledger.Holders(name, max)
	all := append(local, shared...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].Acquired.Before(all[j].Acquired) })
	return all[:min(max, len(all))], n + m
}
