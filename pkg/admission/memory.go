package admission

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// Bulkheads finds the bulkhead a renewal adopts its permit in;
// *bulkhead.Registry is one.
type Bulkheads interface {
	Get(key string) *bulkhead.Limiter
}

// Memory is the in-process backend: the request's limiter (and its
// tenant's compartment) admits, and a permit.Memory keeps the lease. Its
// permits are this process's alone.
type Memory struct {
	bulkheads Bulkheads
	leases    *permit.Memory
	heartbeat permit.Heartbeat
	clock     clock.Clock
	// registered, if set, runs after each registration (WithRegistered).
	registered func()
	// adoptUntil ends the adoption of unknown tokens
	// (permit.Heartbeat.AdoptFor after the backend was built).
	adoptUntil time.Time
	// ended: requests ended that a late periodic entry must not adopt.
	ended permit.EndedTokens
	// recovery: admissions pause this long after the backend was built
	// (0: not at all); pause(false) ends it (Recover).
	recovery  time.Duration
	pause     func(paused bool)
	started   time.Time
	recovered atomic.Bool // Recover has ended the window
}

var _ Ledger = (*Memory)(nil)

// MemoryOption configures a Memory.
type MemoryOption func(*Memory)

// WithClock sets the clock of the adoption window; it must be the
// permit ledger's (default: real).
func WithClock(c clock.Clock) MemoryOption { return func(m *Memory) { m.clock = c } }

// WithRegistered makes Admit call registered right after it registered a
// permit, before it looks at the Check's context once more: tests end that
// context there (a Check cancelled after its grant).
func WithRegistered(registered func()) MemoryOption {
	return func(m *Memory) { m.registered = registered }
}

// WithRecovery makes a backend that starts with heartbeats on admit no one
// for window: the periodic entries of the requests that were running
// before this process started are adopted meanwhile, so that the limits
// count them before anyone new is admitted. pause(true) is called at once,
// pause(false) by Recover when the window ends.
func WithRecovery(window time.Duration, pause func(paused bool)) MemoryOption {
	return func(m *Memory) { m.recovery, m.pause = window, pause }
}

// NewMemory returns the backend whose permits come from bulkheads and
// whose leases leases keeps, renewed to hb.TTL by periodic entries.
func NewMemory(bulkheads Bulkheads, leases *permit.Memory, hb permit.Heartbeat, opts ...MemoryOption) *Memory {
	m := &Memory{bulkheads: bulkheads, leases: leases, heartbeat: hb, clock: clock.Real{}}
	for _, o := range opts {
		o(m)
	}
	m.started = m.clock.Now()
	m.adoptUntil = m.started.Add(hb.AdoptFor())
	if !hb.On() || m.pause == nil {
		m.recovery = 0
	}
	if m.recovery > 0 {
		m.pause(true)
	}
	return m
}

// Recover ends the recovery window (WithRecovery): it resumes admissions
// once the window has passed since the backend was built, and reports
// true, or when ctx ends first (false). Without a window it returns false
// at once.
func (m *Memory) Recover(ctx context.Context) bool {
	if m.recovery <= 0 {
		return false
	}
	defer func() {
		m.recovered.Store(true)
		m.pause(false)
	}()
	t := m.clock.NewTimer(m.recovery - m.clock.Now().Sub(m.started))
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// Admit implements Ledger: a permit of the tenant's compartment first
// (when the request names one), then of the bulkhead, registered with a
// lease of r.Lease. A permit granted after ctx ended is given back.
func (m *Memory) Admit(ctx context.Context, r Request) (Admitted, error) {
	if m.recovery > 0 && !r.Deadline.IsZero() && r.Deadline.Before(m.started.Add(m.recovery)) && !m.recovered.Load() {
		// Paused until the recovery window ends, after this Check's
		// deadline: it cannot be admitted, so it is answered now rather
		// than held (a restart storm holds every Check of the mesh).
		return Admitted{}, bulkhead.ErrTimeout
	}
	p, err := acquire(ctx, &r)
	if err != nil {
		return Admitted{}, err
	}
	token, err := m.leases.Grant(p, permit.Grant{Bulkhead: r.Bulkhead.Name(), Priority: r.Priority, TTL: r.Lease, Node: r.Node})
	if err != nil {
		p.Release()
		return Admitted{}, err
	}
	if m.registered != nil {
		m.registered()
	}
	if err := ctx.Err(); err != nil {
		// Granted, but nobody waits for the answer: no access log will
		// carry this token.
		m.leases.Release(token, permit.Cancel)
		return Admitted{}, err
	}
	return Admitted{Token: token}, nil
}

// acquire takes the permit for r: from the tenant's compartment first when
// the request names one, then from the bulkhead itself. A tenant waiting
// for its own compartment holds nothing of the bulkhead, so a flooding
// tenant queues (and is rejected) in its own compartment while others go
// straight to the bulkhead.
func acquire(ctx context.Context, r *Request) (permit.Releaser, error) {
	var tp bulkhead.Permit
	if r.Tenants != nil && r.Tenant != "" {
		var err error
		if tp, err = acquireTenant(ctx, r); err != nil {
			return nil, err
		}
	}
	p, err := r.Bulkhead.AcquireBefore(ctx, r.Priority, r.Deadline)
	if err != nil {
		tp.Release()
		return nil, err
	}
	if !tp.Valid() {
		return p, nil
	}
	return pair{tenant: tp, bulkhead: p}, nil
}

func acquireTenant(ctx context.Context, r *Request) (bulkhead.Permit, error) {
	for range 3 {
		tl, err := r.Tenants.Get(r.Tenant)
		if err != nil {
			return bulkhead.Permit{}, err
		}
		p, err := tl.AcquireBefore(ctx, r.Priority, r.Deadline)
		if !errors.Is(err, bulkhead.ErrClosed) {
			return p, err
		}
		// The idle tenant was evicted between Get and acquire: get it anew.
	}
	return bulkhead.Permit{}, bulkhead.ErrTooManyTenants
}

// pair is a permit of a tenant's compartment and of its bulkhead, released
// together.
type pair struct{ tenant, bulkhead bulkhead.Permit }

func (p pair) Release() bool {
	p.tenant.Release()
	return p.bulkhead.Release()
}

// Release implements Ledger. An end entry the ledger could not match to a
// live permit (reclaimed, or unknown while unknown tokens are adopted) is
// remembered, so that its request's late periodic entry is not adopted.
func (m *Memory) Release(e Entry, done Done) {
	lease, res := m.leases.Release(e.Token, permit.AccessLog)
	switch {
	case !m.heartbeat.On():
	case res == permit.Expired, res == permit.Unknown && m.adopting():
		m.ended.Add(e.Token)
	}
	done.Done(lease, res)
}

// Renew implements Ledger: it renews the live lease, or adopts the permit
// of a running request the ledger does not hold (within the adoption
// window) or reclaimed under it; a late entry of an ended request is Late.
func (m *Memory) Renew(e Entry, done Done) {
	lease, res := m.leases.Renew(e.Token, m.heartbeat.TTL)
	switch res {
	case permit.Renewed:
		done.Done(lease, res)
		return
	case permit.Duplicate:
		// Ended by its end entry (the heartbeat log is batched, the release
		// log is not: its last periodic entry may come after it) or by a
		// cancelled Check: nothing runs.
		done.Done(lease, permit.Late)
		return
	case permit.Expired:
		if m.ended.Has(e.Token) {
			done.Done(lease, permit.Late)
			return
		}
		res = permit.AdoptedExpired
	default:
		switch {
		case !m.adopting():
			done.Done(lease, permit.Unknown)
			return
		case m.ended.Has(e.Token):
			done.Done(lease, permit.Late)
			return
		}
		res = permit.Adopted
	}
	lease, res = m.adopt(e, res)
	done.Done(lease, res)
}

// adopt counts the running request of e in its bulkhead again, past the
// limit if need be (it runs already), and gives its token a lease; it
// answers res when it did.
func (m *Memory) adopt(e Entry, res permit.Result) (permit.Lease, permit.Result) {
	l := m.bulkheads.Get(string(e.Bulkhead))
	if l == nil {
		return permit.Lease{}, permit.Unknown
	}
	p, err := l.Adopt()
	if err != nil {
		return permit.Lease{}, permit.Unknown // the bulkhead was removed meanwhile
	}
	lease, err := m.leases.Adopt(p, e.Token, permit.Grant{Bulkhead: l.Name(), Priority: bulkhead.Normal, TTL: m.heartbeat.TTL,
		Node: e.Node})
	switch {
	case errors.Is(err, permit.ErrLive):
		p.Release()
		return lease, permit.Renewed // adopted by a concurrent entry
	case err != nil:
		p.Release()
		return permit.Lease{}, permit.Unknown
	}
	return lease, res
}

// adopting reports whether periodic entries with unknown tokens are
// adopted now.
func (m *Memory) adopting() bool { return m.clock.Now().Before(m.adoptUntil) }

// Holders implements Ledger.
func (m *Memory) Holders(bulkhead string, max int) ([]permit.Lease, int) {
	return m.leases.Holders(bulkhead, max)
}
