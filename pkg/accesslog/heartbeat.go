package accesslog

import (
	"sync"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// heardNodes remembers when each Envoy node last sent a periodic entry, on
// whichever of its streams. The shipped Envoy config sends periodic entries
// on a batched logger of their own, apart from the end entries
// (envoy/front-proxy.yaml.tmpl), so whether a node heartbeats is known by
// node, not by the stream its end entries come on. Bounded: when full, the
// nodes not heard for stale are forgotten (at most once per stale); a new
// node that still finds no room is not remembered. Safe for concurrent use.
type heardNodes struct {
	stale  time.Duration
	mu     sync.Mutex
	m      map[string]time.Time
	pruned time.Time
}

func newHeardNodes(stale time.Duration) *heardNodes {
	return &heardNodes{stale: stale, m: map[string]time.Time{}}
}

// heard records that node sent a periodic entry at now.
func (h *heardNodes) heard(node string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.m[node]; !ok && len(h.m) >= permit.MaxNodes {
		if now.Sub(h.pruned) < h.stale {
			return
		}
		h.pruned = now
		for n, at := range h.m {
			if now.Sub(at) >= h.stale {
				delete(h.m, n)
			}
		}
		if len(h.m) >= permit.MaxNodes {
			return
		}
	}
	h.m[node] = now
}

// since reports whether node sent a periodic entry at or after t.
func (h *heardNodes) since(node string, t time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok := h.m[node]
	return ok && !at.Before(t)
}
