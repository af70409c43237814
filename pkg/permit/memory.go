package permit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// maxKeyTries bounds how often Grant draws a new key when the drawn one is
// taken. With 128 random bits a second draw never happens in practice.
const maxKeyTries = 3

// errKeyReused means crypto/rand drew used keys maxKeyTries times in a row,
// which only a broken random source does.
var errKeyReused = errors.New("token: crypto/rand repeated used 128-bit keys")

// Memory is the in-memory lease store: one process holds every lease. It is safe
// for concurrent use; see the package documentation for its guarantees.
type Memory struct {
	clk      clock.Clock
	obs      Observer
	shards   []shard
	mask     uint64
	max      int64
	interval time.Duration
	count    atomic.Int64 // live leases plus grants that reserved a slot
	closed   atomic.Bool
	// tag, once set (TagTokens), is the last tagLen bytes of every token
	// Grant issues.
	tag atomic.Pointer[Tag]
	// hold, once set (HoldExpiries), stops Sweep while it reports true.
	hold atomic.Pointer[func() bool]
}

// HoldExpiries makes Sweep expire nothing while hold reports true: for a
// ledger whose permits' periodic entries may reach another process, which
// forwards them here, a permit that hears nothing while that path is cut
// may still run (redisledger's capacity leases hold expiries while Redis
// is unreachable). The permits expire at the first Sweep after.
func (l *Memory) HoldExpiries(hold func() bool) { l.hold.Store(&hold) }

// TagTokens makes every token Grant issues from now on end with tag (the
// owner's Tag): a shared ledger that does not know such a token can tell
// whose it is (redisledger's capacity leases). The other bytes stay random:
// a token keeps 96 random bits.
func (l *Memory) TagTokens(tag Tag) { l.tag.Store(&tag) }

// NewMemory returns an empty ledger that reads time from clk.
func NewMemory(clk clock.Clock, opts ...Option) *Memory {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	l := &Memory{
		clk:      clk,
		obs:      o.observer,
		shards:   make([]shard, o.shards),
		mask:     uint64(o.shards - 1),
		max:      int64(o.maxLeases),
		interval: o.interval,
	}
	for i := range l.shards {
		l.shards[i].init(o.tombstones)
	}
	return l
}

func (l *Memory) shardIndex(k *key) uint64 { return binary.LittleEndian.Uint64(k[:8]) & l.mask }

func (l *Memory) shardFor(k *key) *shard { return &l.shards[l.shardIndex(k)] }

// Grant registers permit p as a lease and returns its token; the ledger then
// owns p until it releases it (granting one permit twice would release it
// twice). The lease expires g.TTL after clk.Now(). On error the
// ledger did not take p: the caller must release it (and deny the request).
// The error is ErrFull at the lease cap, ErrClosed after Close, or
// ErrInvalidGrant for a nil permit or a TTL <= 0.
func (l *Memory) Grant(p Releaser, g Grant) (string, error) {
	if p == nil {
		return "", fmt.Errorf("%w: nil permit", ErrInvalidGrant)
	}
	if g.TTL <= 0 {
		return "", fmt.Errorf("%w: ttl %v", ErrInvalidGrant, g.TTL)
	}
	if l.closed.Load() {
		return "", ErrClosed
	}
	if l.count.Add(1) > l.max {
		l.count.Add(-1)
		return "", ErrFull // unwrapped: no allocation on the overload path
	}
	for range maxKeyTries {
		var k key
		if err := newKey(&k); err != nil {
			l.count.Add(-1)
			return "", fmt.Errorf("token: %w", err)
		}
		if tag := l.tag.Load(); tag != nil {
			copy(k[keyLen-tagLen:], tag[:])
		}
		token := k.text()
		now := l.clk.Now()
		s := l.shardFor(&k)
		s.mu.Lock()
		if l.closed.Load() {
			s.mu.Unlock()
			l.count.Add(-1)
			return "", ErrClosed
		}
		if s.taken(&k) {
			s.mu.Unlock()
			continue
		}
		s.add(&k, p, Lease{
			Token:    token,
			Bulkhead: g.Bulkhead,
			Node:     g.Node,
			Priority: g.Priority,
			Acquired: now,
			Expires:  now.Add(g.TTL),
		})
		s.mu.Unlock()
		return token, nil
	}
	l.count.Add(-1)
	return "", errKeyReused
}

// Release ends the lease named by token and releases its permit. Exactly one
// call per lease, across Release, Sweep and Close, returns
// Released (with the lease); any later Release of the token is Expired (the
// lease ended by expiry) or Duplicate (by anything else) while the ledger
// remembers it (see WithTombstones), and Unknown after.
// A token that is malformed or was never issued is Unknown. The lease is the
// zero Lease unless the result is Released.
func (l *Memory) Release(token string, src Source) (Lease, Result) {
	k, ok := parseToken(token)
	if !ok {
		l.obs.Ignored(src, Unknown)
		return Lease{}, Unknown
	}
	s := l.shardFor(&k)
	s.mu.Lock()
	e := s.live[k]
	if e == nil {
		r := s.gone(&k)
		s.mu.Unlock()
		l.obs.Ignored(src, r)
		return Lease{}, r
	}
	out := s.remove(e, src)
	l.count.Add(-1)
	s.mu.Unlock()
	l.finish(out, src, l.clk.Now())
	return out.lease, Released
}

// finish releases a lease that has left the ledger and tells the observer.
// It is called outside every lock, once per lease.
func (l *Memory) finish(e ended, src Source, at time.Time) {
	e.p.Release()
	l.obs.Ended(e.lease, src, at)
}

// Len returns the number of live leases. Under concurrent Grants it may
// include a grant in progress.
func (l *Memory) Len() int { return int(l.count.Load()) }
