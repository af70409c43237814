package permit

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// MaxNodes bounds the Envoy nodes remembered by node id, silent or heard
// from (a mesh of up to that many Envoys is tracked whole; beyond, the
// stalest are forgotten or new ones not remembered).
const MaxNodes = 16384

// SilentNodes remembers the Envoy nodes seen not to send periodic entries,
// so that each is logged once and its later permits get the long lease
// (Silent: the Check server reads it). A node that sends a periodic entry
// again is forgotten. Safe for concurrent use; Silent is lock-free while no
// node is silent.
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

// Mark records that node sends no periodic entries, logging it the first
// time. Ids that are not valid node ids are logged truncated and not kept.
func (s *SilentNodes) Mark(node string, problem HeartbeatProblem, lease Lease, held time.Duration) {
	if s == nil {
		return
	}
	if !ValidNodeID(node) {
		s.log.Warn("an Envoy without a valid node id sends no periodic access-log entries: "+
			"its permits are reclaimed while its requests run", "node", truncated(node), "problem", problem)
		return
	}
	s.mu.Lock()
	_, known := s.m[node]
	if !known && len(s.m) < MaxNodes {
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

// Heard forgets node: it sends periodic entries (again).
func (s *SilentNodes) Heard(node string) {
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

// truncated bounds a node id from the wire before it is logged.
func truncated(v string) string {
	if len(v) > MaxNodeIDLen {
		return v[:MaxNodeIDLen] + "..."
	}
	return v
}
