package permit

import "sync"

// maxEndedTokens bounds the tokens EndedTokens remembers: at least the last
// half of it, at most all of it.
const maxEndedTokens = 8192

// EndedTokens remembers the tokens of requests whose end entry came when
// a ledger could not tell their permit had ended: a permit it never held
// (the daemon restarted since the grant) or one it had reclaimed. The
// shipped Envoy config batches periodic entries (a quarter interval) and
// sends end entries at once, so a request's last periodic entry can come
// after its end entry; without this, that late entry would adopt the
// finished request's permit (or adopt it again) and hold it for a TTL. The
// ledger's own memory of ended tokens covers the permits it released.
// Two generations of maps, never a delete. Safe for concurrent use.
type EndedTokens struct {
	mu       sync.Mutex
	cur, old map[string]struct{}
}

// Add remembers token; one that no Grant could issue is not kept.
func (t *EndedTokens) Add(token string) {
	if len(token) != TokenLen {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.cur) >= maxEndedTokens/2 {
		t.old, t.cur = t.cur, nil
	}
	if t.cur == nil {
		t.cur = make(map[string]struct{}, 64)
	}
	t.cur[token] = struct{}{}
}

// Has reports whether token is remembered.
func (t *EndedTokens) Has(token string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, a := t.cur[token]
	_, b := t.old[token]
	return a || b
}
