package accesslog

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// Heartbeat is the lease contract with Envoy's periodic access log: Envoy
// logs every request in flight each Interval (access_log_flush_interval on
// its HTTP connection manager), each periodic entry renews its permit's
// lease to TTL from now, and a lease neither renewed nor ended within TTL
// is reclaimed. The zero Heartbeat turns renewal off: periodic entries are
// counted and ignored, and leases last their full TTL.
type Heartbeat struct {
	Interval time.Duration
	TTL      time.Duration
}

// On reports whether periodic entries renew leases.
func (h Heartbeat) On() bool { return h.Interval > 0 && h.TTL > 0 }

// silentAfter is how long a permit must have been held for its request to
// have had a periodic entry, with room for Envoy's timer and the delivery:
// an end entry of a permit held this long and never renewed tells that its
// Envoy does not send periodic entries.
func (h Heartbeat) silentAfter() time.Duration { return 2*h.Interval + h.Interval/2 }

// maxSilentNodes bounds the nodes remembered as silent (and logged).
const maxSilentNodes = 4096

// SilentNodes remembers the Envoy nodes seen not to send periodic entries,
// so that each is logged once and its later permits get the long lease
// (Silent). A node that sends a periodic entry again is forgotten. Safe for
// concurrent use; Silent is lock-free while no node is silent.
type SilentNodes struct {
	log *slog.Logger
	n   atomic.Int32 // len(m), read without the lock
	mu  sync.Mutex
	m   map[string]struct{}
}

// NewSilentNodes returns an empty set that logs to log.
func NewSilentNodes(log *slog.Logger) *SilentNodes {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &SilentNodes{log: log, m: map[string]struct{}{}}
}

// Silent reports whether node was seen not to send periodic entries.
func (s *SilentNodes) Silent(node string) bool {
	if s == nil || node == "" || s.n.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[node]
	return ok
}

// mark records that node sends no periodic entries, logging it the first
// time. Ids that are not valid node ids are logged truncated and not kept.
func (s *SilentNodes) mark(node string, problem permit.HeartbeatProblem, lease permit.Lease, held time.Duration) {
	if s == nil {
		return
	}
	if !permit.ValidNodeID(node) {
		s.log.Warn("an Envoy without a valid node id sends no periodic access-log entries: "+
			"its permits are reclaimed while its requests run", "node", truncate(node), "problem", problem)
		return
	}
	s.mu.Lock()
	_, known := s.m[node]
	if !known && len(s.m) < maxSilentNodes {
		s.m[node] = struct{}{}
		s.n.Store(int32(len(s.m)))
	}
	s.mu.Unlock()
	if !known {
		s.log.Warn("Envoy node sends no periodic access-log entries: set access_log_options.access_log_flush_interval "+
			"on its HTTP connection manager to leases.heartbeat_interval; until then its Checks with x-bulkhead-node "+
			"get the bulkhead's full lease_ttl and its other permits are reclaimed while their requests run",
			"node", node, "problem", problem, "bulkhead", lease.Bulkhead, "held", held)
	}
}

// heard forgets node: it sends periodic entries (again).
func (s *SilentNodes) heard(node string) {
	if s == nil || s.n.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[node]; ok {
		delete(s.m, node)
		s.n.Store(int32(len(s.m)))
		s.log.Info("Envoy node sends periodic access-log entries again", "node", node)
	}
}

// maxHeardNodes bounds the nodes remembered as sending periodic entries.
const maxHeardNodes = 4096

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
	if _, ok := h.m[node]; !ok && len(h.m) >= maxHeardNodes {
		if now.Sub(h.pruned) < h.stale {
			return
		}
		h.pruned = now
		for n, at := range h.m {
			if now.Sub(at) >= h.stale {
				delete(h.m, n)
			}
		}
		if len(h.m) >= maxHeardNodes {
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
