package authz

import "time"

// ExtLeaseTTL is the context_extensions key of a route's own lease TTL, a Go
// duration ("90s"); it is capped at Policy.MaxRouteLeaseTTL.
const ExtLeaseTTL = "lease_ttl"

// maxDurationText bounds the lease_ttl text that is parsed.
const maxDurationText = 32

// leaseTTL is the first lease of a permit of bulkhead key granted to node.
// With heartbeats on (Policy.HeartbeatTTL), it is the heartbeat TTL: the
// request's periodic access-log entries renew it. Otherwise, and for a node
// seen not to send periodic entries, it is the long lease: the route's
// context_extensions lease_ttl when it is a positive duration (cut to
// MaxRouteLeaseTTL), else the bulkhead's. A route value that is not a
// positive duration, or above the cap, is counted when it is used.
func (s *Server) leaseTTL(pol *Policy, key string, route optional, node string) time.Duration {
	if pol.HeartbeatTTL > 0 && !s.silent.Silent(node) {
		return pol.HeartbeatTTL
	}
	if !route.ok {
		return pol.leaseTTL(key)
	}
	v := route.v
	d, err := time.Duration(0), error(nil)
	if len(v) <= maxDurationText {
		d, err = time.ParseDuration(v)
	}
	switch {
	case len(v) > maxDurationText || err != nil || d <= 0 || pol.MaxRouteLeaseTTL <= 0:
		s.rec.InvalidLeaseTTL(key)
		return pol.leaseTTL(key)
	case d > pol.MaxRouteLeaseTTL:
		s.rec.InvalidLeaseTTL(key)
		return pol.MaxRouteLeaseTTL
	}
	return d
}
