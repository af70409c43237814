package isolation

import (
	"context"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// Resize changes the pool's settings at run time: s.MaxConcurrent workers
// and a queue of s.MaxQueue. Growing starts the new workers before the
// limiter admits more calls, so queued calls start at once. Shrinking never
// interrupts a call: idle workers beyond the new limit stop now, busy ones
// when their call ends; a smaller queue sheds its youngest, lowest-class
// waiters (bulkhead.ErrShed). Invalid settings change nothing and return
// the validation error; a closing pool returns bulkhead.ErrClosed.
func (p *Pool) Resize(s bulkhead.Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	p.resizeMu.Lock()
	defer p.resizeMu.Unlock()
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return bulkhead.ErrClosed
	}
	grow := s.MaxConcurrent > p.target
	if grow {
		p.target = s.MaxConcurrent
		p.growLocked()
	}
	p.mu.Unlock()
	if err := p.lim.Resize(s); err != nil {
		return err
	}
	if !grow {
		p.mu.Lock()
		p.target = s.MaxConcurrent
		p.retireIdleLocked()
		p.mu.Unlock()
	}
	return nil
}

// Settings returns the pool's current settings.
func (p *Pool) Settings() bulkhead.Settings { return p.lim.Settings() }

// Close stops the pool gracefully. New calls are rejected at once with
// bulkhead.ErrClosed (never run, whatever the policy); calls already queued
// or running are let finish. Once they have, the workers stop and Close
// returns nil when every worker goroutine has exited.
//
// If ctx ends first, Close rejects the calls still queued (ErrClosed),
// cancels the contexts of running calls (cause bulkhead.ErrClosed) and
// returns ctx.Err() without waiting further: each worker exits as soon as
// its call returns, and a later Close (say with context.Background())
// waits for them. A call that ignores its context is the only thing that
// can keep a worker alive after Close; Go cannot stop a goroutine.
//
// Close is idempotent and safe to call concurrently with anything.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closing {
		p.closing = true
		p.pending++ // leaveLocked signals drained if nothing is pending
		p.leaveLocked()
	}
	p.mu.Unlock()
	select {
	case <-p.drained:
	case <-ctx.Done():
		p.stop(true)
		return ctx.Err()
	}
	p.stop(false)
	select {
	case <-p.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop closes the limiter (rejecting its queue), stops handing out jobs,
// retires idle workers and, when cancelRunning, cancels running calls.
func (p *Pool) stop(cancelRunning bool) {
	p.lim.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if cancelRunning {
		for w := range p.all {
			if w.cur != nil {
				w.cur.cancel(bulkhead.ErrClosed)
			}
		}
	}
	p.retireIdleLocked()
	p.signalExitedLocked()
}

// PoolStats describes a pool beyond its limiter's Snapshot.
type PoolStats struct {
	// Snapshot is the pool's Snapshot: InUse counts calls holding a worker
	// slot, Queued calls waiting for one.
	Snapshot bulkhead.Snapshot
	// Workers counts live workers (idle or running a call); Idle the parked ones.
	Workers, Idle int
	// CallerRuns counts calls run on the caller's goroutine by CallerRuns.
	CallerRuns uint64
	// Abandoned counts calls whose caller stopped waiting (ctx or call timeout).
	Abandoned uint64
	// Panics counts calls that panicked or called runtime.Goexit.
	Panics uint64
}

// Stats returns the pool's state and counters.
func (p *Pool) Stats() PoolStats {
	s := p.Snapshot()
	p.mu.Lock()
	workers, idle := p.live, len(p.idle)
	p.mu.Unlock()
	return PoolStats{
		Snapshot: s, Workers: workers, Idle: idle,
		CallerRuns: p.callerRuns.Load(), Abandoned: p.abandoned.Load(), Panics: p.panics.Load(),
	}
}

// Snapshot returns the limiter's snapshot, with the calls Close rejected
// before they reached the limiter counted as rejected (unknown_bulkhead,
// the reason of bulkhead.ErrClosed), and Closed set from the first Close.
func (p *Pool) Snapshot() bulkhead.Snapshot {
	s := p.lim.Snapshot()
	s.Rejected[bulkhead.ReasonUnknownBulkhead] += p.closedRejects.Load()
	p.mu.Lock()
	s.Closed = s.Closed || p.closing
	p.mu.Unlock()
	return s
}
