package accesslog

import (
	"sync"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// maxEndedTokens bounds the tokens endedTokens remembers: at least the last
// half of it, at most all of it.
const maxEndedTokens = 8192

// endedTokens remembers the tokens of requests whose end entry came when
// the ledger could not tell their permit had ended: a permit it never held
// (the daemon restarted since the grant) or one it had reclaimed. The
// shipped Envoy config batches periodic entries (a quarter interval) and
// sends end entries at once, so a request's last periodic entry can come
// after its end entry; without this, that late entry would adopt the
// finished request's permit (or adopt it again) and hold it for a TTL. The
// ledger's own memory of ended tokens covers the permits it released.
// Two generations of maps, never a delete. Safe for concurrent use.
type endedTokens struct {
	mu       sync.Mutex
	cur, old map[string]struct{}
}

// add remembers token; one that no Grant could issue is not kept.
func (t *endedTokens) add(token string) {
	if len(token) != permit.TokenLen {
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

func (t *endedTokens) has(token string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, a := t.cur[token]
	_, b := t.old[token]
	return a || b
}
