package permit

import (
	"cmp"
	"slices"
	"time"
)

// Holders returns up to max of bulkhead's live leases, oldest first, and how
// many live leases bulkhead has. It visits every lease, one shard lock at a
// time: it is meant for an operator's question, not the request path. max
// <= 0 returns only the count.
func (l *Memory) Holders(bulkhead string, max int) ([]Lease, int) {
	var out []Lease
	total := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for _, e := range s.live {
			if e.lease.Bulkhead != bulkhead {
				continue
			}
			total++
			if max > 0 {
				out = append(out, e.lease)
			}
		}
		s.mu.Unlock()
		// Keep at most max between shards: memory stays bounded by max
		// plus one shard's share.
		if max > 0 && len(out) > max {
			sortOldestFirst(out)
			out = out[:max]
		}
	}
	sortOldestFirst(out)
	return out, total
}

func sortOldestFirst(ls []Lease) {
	slices.SortFunc(ls, func(a, b Lease) int {
		if c := a.Acquired.Compare(b.Acquired); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
}

// Oldest returns, for each bulkhead with live leases, when its oldest live
// lease was acquired. It visits every lease, one shard lock at a time (a
// metrics scrape, not the request path).
func (l *Memory) Oldest() map[string]time.Time {
	out := make(map[string]time.Time)
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for _, e := range s.live {
			if t, ok := out[e.lease.Bulkhead]; !ok || e.lease.Acquired.Before(t) {
				out[e.lease.Bulkhead] = e.lease.Acquired
			}
		}
		s.mu.Unlock()
	}
	return out
}
