package permit

import (
	"context"
	"time"
)

// batchSize bounds how many leases Sweep and Close end per
// acquisition of a shard lock, so that Grant and Release never wait long.
const batchSize = 256

// Sweep ends every lease whose Expires <= clk.Now() (read once, at the
// start), with source TTL, and returns how many it ended: none while
// expiries are held (HoldExpiries).
func (l *Memory) Sweep() int {
	if hold := l.hold.Load(); hold != nil && (*hold)() {
		return 0
	}
	now := l.clk.Now()
	return l.drain(TTL, now, func(s *shard) *entry {
		if len(s.exp) > 0 && !s.exp[0].lease.Expires.After(now) {
			return s.exp[0]
		}
		return nil
	})
}

// Close stops further grants (they fail with ErrClosed), ends every lease
// with source src and returns how many it ended. Later calls return 0.
func (l *Memory) Close(src Source) int {
	l.closed.Store(true)
	return l.drain(src, l.clk.Now(), func(s *shard) *entry {
		if len(s.exp) > 0 {
			return s.exp[0]
		}
		return nil
	})
}

// Run sweeps every sweep interval, timed by the ledger's clock, until ctx
// ends; then it returns nil. It is meant to run in one goroutine per ledger.
func (l *Memory) Run(ctx context.Context) error {
	for {
		t := l.clk.NewTimer(l.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
			l.Sweep()
		}
	}
}

// drain ends, shard by shard, the leases that next picks (nil: none left in
// that shard), in batches of at most batchSize per lock, and releases them
// outside the lock. It returns how many it ended.
func (l *Memory) drain(src Source, at time.Time, next func(*shard) *entry) int {
	var batch []ended
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		for {
			batch = batch[:0]
			s.mu.Lock()
			for len(batch) < batchSize {
				e := next(s)
				if e == nil {
					break
				}
				batch = append(batch, s.remove(e, src))
			}
			l.count.Add(-int64(len(batch)))
			s.mu.Unlock()
			for j := range batch {
				l.finish(batch[j], src, at)
				batch[j] = ended{}
			}
			n += len(batch)
			if len(batch) < batchSize {
				break
			}
		}
	}
	return n
}
