package permit

import (
	"container/heap"
	"fmt"
	"time"
)

// Renew extends the live lease named by token so that it expires no sooner
// than ttl after clk.Now(), records the renewal, and returns the lease and
// Renewed. A lease is never shortened: a renewal with a ttl shorter than
// what is left only records that it was heard from. A token without a live
// lease is Expired or Duplicate while the ledger remembers how it ended,
// Unknown otherwise; nothing changes then. A ttl <= 0 renews nothing but is
// still reported by the lease's state.
func (l *Memory) Renew(token string, ttl time.Duration) (Lease, Result) {
	k, ok := parseToken(token)
	if !ok {
		return Lease{}, Unknown
	}
	now := l.clk.Now()
	s := l.shardFor(&k)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.live[k]
	if e == nil {
		return Lease{}, s.gone(&k)
	}
	if exp := now.Add(ttl); ttl > 0 && exp.After(e.lease.Expires) {
		e.lease.Expires = exp
		heap.Fix(&s.exp, e.idx)
	}
	e.lease.Renewed = now
	return e.lease, Renewed
}

// Adopt registers p as the lease of token, a permit granted by an earlier
// process (or whose lease this ledger already reclaimed) whose request still
// runs. The lease is marked Adopted, expires g.TTL after clk.Now(), and is
// ended like any other. On error the ledger did not take p: ErrLive when
// token already has a live lease (the request is counted), ErrInvalidToken
// when token is not one Grant issues, and the errors of Grant.
func (l *Memory) Adopt(p Releaser, token string, g Grant) (Lease, error) {
	if p == nil {
		return Lease{}, fmt.Errorf("%w: nil permit", ErrInvalidGrant)
	}
	if g.TTL <= 0 {
		return Lease{}, fmt.Errorf("%w: ttl %v", ErrInvalidGrant, g.TTL)
	}
	k, ok := parseToken(token)
	if !ok {
		return Lease{}, ErrInvalidToken
	}
	if l.closed.Load() {
		return Lease{}, ErrClosed
	}
	if l.count.Add(1) > l.max {
		l.count.Add(-1)
		return Lease{}, ErrFull
	}
	now := l.clk.Now()
	s := l.shardFor(&k)
	s.mu.Lock()
	if l.closed.Load() {
		s.mu.Unlock()
		l.count.Add(-1)
		return Lease{}, ErrClosed
	}
	if s.live[k] != nil {
		s.mu.Unlock()
		l.count.Add(-1)
		return Lease{}, ErrLive
	}
	lease := Lease{
		Token:    k.text(),
		Bulkhead: g.Bulkhead,
		Node:     g.Node,
		Priority: g.Priority,
		Acquired: now,
		Expires:  now.Add(g.TTL),
		Renewed:  now,
		Adopted:  true,
	}
	s.add(&k, p, lease)
	s.mu.Unlock()
	return lease, nil
}
