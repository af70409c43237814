package permit

import (
	"container/heap"
	"sync"
)

// maxFree bounds each shard's cache of recycled entries.
const maxFree = 64

// entry is one live lease. It is owned by its shard and only touched with the
// shard's mutex held.
type entry struct {
	key   key
	p     Releaser
	lease Lease
	// idx is the entry's position in the shard's expiry heap.
	idx int
}

// ended is what is left of a lease once it is out of the ledger: enough to
// release the permit and tell the observer, outside the lock.
type ended struct {
	p     Releaser
	lease Lease
}

// shard holds the leases whose tokens map to it.
type shard struct {
	mu   sync.Mutex
	live map[key]*entry
	exp  expiryHeap
	tomb tombstones
	free []*entry
	_    [64]byte // keep neighbouring shards' mutexes off one cache line
}

func (s *shard) init(tombstones int) {
	s.live = make(map[key]*entry)
	s.tomb.init(tombstones)
}

// taken reports whether k is live or remembered (a fresh key must be
// neither). Called with s.mu held.
func (s *shard) taken(k *key) bool {
	_, ok := s.live[*k]
	return ok || s.tomb.has(k)
}

// newEntry returns a zeroed entry, recycled when possible. Called with s.mu
// held.
func (s *shard) newEntry() *entry {
	if n := len(s.free); n > 0 {
		e := s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
		return e
	}
	return new(entry)
}

// add makes a lease of permit p under key k live. Called with s.mu held.
func (s *shard) add(k *key, p Releaser, l Lease) {
	e := s.newEntry()
	e.key, e.p, e.lease = *k, p, l
	s.insert(e)
}

// insert makes e live. Called with s.mu held.
func (s *shard) insert(e *entry) {
	s.live[e.key] = e
	heap.Push(&s.exp, e)
}

// remove ends e: it leaves the map and the heap, its token is remembered
// with src (what ended it), and the entry is recycled. It returns what the
// caller needs to finish the release outside the lock. Called with s.mu
// held.
func (s *shard) remove(e *entry, src Source) ended {
	out := ended{p: e.p, lease: e.lease}
	delete(s.live, e.key)
	heap.Remove(&s.exp, e.idx)
	s.tomb.add(&e.key, src)
	if len(s.free) < maxFree {
		*e = entry{}
		s.free = append(s.free, e)
	}
	return out
}

// expiryHeap is a min-heap of entries on lease.Expires that keeps each
// entry's index, so that any entry can be removed in O(log n).
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].lease.Expires.Before(h[j].lease.Expires) }

func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}

func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}

func (h *expiryHeap) Pop() any {
	old := *h
	n := len(old) - 1
	e := old[n]
	old[n] = nil
	e.idx = -1
	*h = old[:n]
	return e
}

// tombstones remembers the keys of recently ended leases in two
// generations of at most gen keys each: keys go into cur; when cur is full,
// it becomes prev and the old prev is cleared and reused as cur. So the
// newest gen to 2*gen ended keys are remembered, and neither map ever sees a
// delete (churning deletes make Go maps probe long chains of tombstones).
type tombstones struct {
	gen       int            // 0: remember nothing
	cur, prev map[key]Source // what ended the lease
}

func (t *tombstones) init(n int) {
	t.gen = (n + 1) / 2
}

func (t *tombstones) has(k *key) bool {
	_, ok := t.get(k)
	return ok
}

// get returns what ended the lease of k, if k is remembered.
func (t *tombstones) get(k *key) (Source, bool) {
	src, ok := t.cur[*k]
	if !ok {
		src, ok = t.prev[*k]
	}
	return src, ok
}

func (t *tombstones) add(k *key, src Source) {
	if t.gen == 0 {
		return
	}
	if t.cur == nil {
		t.cur = make(map[key]Source)
	}
	if len(t.cur) >= t.gen {
		if t.prev == nil {
			t.prev = make(map[key]Source, t.gen)
		}
		t.cur, t.prev = t.prev, t.cur
		clear(t.cur)
	}
	t.cur[*k] = src
}

// gone says why k has no live lease: Expired or Duplicate while its end is
// remembered, else Unknown. Called with s.mu held.
func (s *shard) gone(k *key) Result {
	src, ok := s.tomb.get(k)
	switch {
	case !ok:
		return Unknown
	case src == TTL:
		return Expired
	default:
		return Duplicate
	}
}
