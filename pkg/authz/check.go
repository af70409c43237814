package authz

import (
	"context"
	"errors"
	"net/netip"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// check answers r under pol. Every decision a Check takes is in this file,
// in this order: the node, the bulkhead (the route's, the connection's
// port, or the unmatched policy), its circuit breaker, the class, the
// lease, the tenant; then one call into the ledger (admit), whichever
// backend it is.
func (s *Server) check(ctx context.Context, pol *Policy, r *request) (answer, error) {
	start := s.clock.Now()
	node, badNode := nodeOf(ctx)
	if badNode {
		s.inputs.InvalidInput(bulkhead.InputNode)
	}
	key := r.bulkhead
	conn, isConn := pol.connection(r)
	if isConn {
		key = conn.Bulkhead
	}

	l := s.bulkheads.Get(key)
	if l == nil {
		switch pol.Unmatched {
		case Allow:
			s.rec.Unmatched(bulkhead.UnmatchedAllowed)
			return respond(allowed()), nil
		case UseDefault:
			if l = s.bulkheads.Get(pol.DefaultBulkhead); l != nil {
				s.rec.Unmatched(bulkhead.UnmatchedDefaulted)
				key = pol.DefaultBulkhead
			}
		}
		if l == nil {
			s.rec.Unmatched(bulkhead.UnmatchedDenied)
			return respond(denied(pol, key, bulkhead.ReasonUnknownBulkhead)), nil
		}
	}

	if resp, refused := s.circuit(pol, l, key); refused {
		return respond(resp), nil
	}
	var prio bulkhead.Priority
	if isConn {
		prio = s.connectionPriority(conn, r)
	} else {
		prio = s.priority(pol, key, r)
	}
	req := admission.Request{Bulkhead: l, Priority: prio, Node: node, Lease: s.leaseTTL(pol, key, r.leaseTTL, node)}
	if d, ok := ctx.Deadline(); ok {
		req.Deadline = d.Add(-pol.DeadlineMargin)
	}
	req.Tenants, req.Tenant = s.tenantOf(pol, key, r.tenant)
	return s.admit(ctx, pol, req, start)
}

// admit asks the ledger for req's permit and answers with it.
func (s *Server) admit(ctx context.Context, pol *Policy, req admission.Request, start time.Time) (answer, error) {
	key := req.Bulkhead.Name()
	a, err := s.ledger.Admit(ctx, req)
	switch {
	case err == nil && a.Unguarded:
		return respond(allowed()), nil
	case err == nil:
		s.rec.Waited(key, s.clock.Now().Sub(start))
		return answer{token: a.Token, key: key}, nil
	}
	if reason := bulkhead.ReasonOf(err); reason != bulkhead.ReasonNone {
		return respond(denied(pol, key, reason)), nil
	}
	if ctx.Err() != nil {
		// The Check's context ended while it waited (Envoy cancelled it:
		// the client went away) or just after its permit was granted, or
		// its deadline passed. Nobody listens.
		return answer{}, status.FromContextError(ctx.Err()).Err()
	}
	s.log.Error("no permit", "bulkhead", key, "err", err)
	if errors.Is(err, permit.ErrFull) || errors.Is(err, permit.ErrClosed) {
		return answer{}, status.Errorf(codes.ResourceExhausted, "bulkhead: %v", err)
	}
	return answer{}, status.Errorf(codes.Internal, "bulkhead: %v", err)
}

// nodeOf returns the node named by the Check's NodeHeader metadata, or ""
// when it is missing, given more than once, or not a valid node id
// (permit.ValidNodeID, at most permit.MaxNodeIDLen bytes): such
// permits are not reclaimed by node. bad reports a value that was present
// but ignored.
func nodeOf(ctx context.Context) (node string, bad bool) {
	v := metadata.ValueFromIncomingContext(ctx, NodeHeader) // copies one value, not the whole MD
	switch {
	case len(v) == 0:
		return "", false
	case len(v) != 1 || !permit.ValidNodeID(v[0]):
		return "", true
	}
	return v[0], false
}

// connection is the bulkhead and class of a network (TCP) Check: one
// without an HTTP request, named by the listener port it came in on. ok is
// false for an HTTP Check, a Check naming its bulkhead in
// context_extensions, and a port no bulkhead claims.
func (p *Policy) connection(r *request) (Connection, bool) {
	if r.http || r.bulkhead != "" {
		return Connection{}, false
	}
	c, ok := p.Connections[r.port]
	return c, ok
}

// connectionPriority is the class of a connection of c: the Envoy's label
// when it is a valid class (an invalid one is counted and ignored), else
// the port's.
func (s *Server) connectionPriority(c Connection, r *request) bulkhead.Priority {
	if !r.label.ok {
		return c.Priority
	}
	if p, ok := parsePriority(r.label.v); ok {
		return p
	}
	s.rec.InvalidPriority(c.Bulkhead)
	return c.Priority
}

// circuit asks the bulkhead's breaker about a Check for key, whose limiter
// is l. An open breaker refuses it with reason circuit_open and retry-after
// set to the time left, without taking a permit; a dry-run bulkhead only
// counts that it would have (refused is false).
func (s *Server) circuit(pol *Policy, l *bulkhead.Limiter, key string) (resp *authv3.CheckResponse, refused bool) {
	if s.breakers == nil {
		return nil, false
	}
	ok, wait := s.breakers.Allow(key)
	if ok || !l.RejectOutside(bulkhead.ReasonCircuitOpen) {
		return nil, false
	}
	return deniedAfter(pol, key, bulkhead.ReasonCircuitOpen, retryAfterValue(wait)), true
}

// priority picks the class. The route's context_extensions["priority"],
// else the default, is the base. The configured header replaces it when the
// request comes from a trusted source, or when it does not raise the class:
// any client may lower its own priority, only trusted ones may raise it. A
// raise from elsewhere is counted and ignored; an unknown or oversized
// value is counted and ignored.
func (s *Server) priority(pol *Policy, key string, r *request) bulkhead.Priority {
	base := pol.DefaultPriority
	if r.priority.ok {
		if p, ok := parsePriority(r.priority.v); ok {
			base = p
		} else {
			s.rec.InvalidPriority(key)
		}
	}
	if !r.header.ok {
		return base
	}
	p, ok := parsePriority(r.header.v)
	switch {
	case !ok:
		s.rec.InvalidPriority(key)
		return base
	case p >= base: // the same class or a lower one (higher value)
		return p
	case pol.trusts(r.source):
		return p
	}
	s.inputs.UntrustedPriority(key)
	return base
}

// parsePriority parses a class name, refusing oversized values unread.
func parsePriority(v string) (bulkhead.Priority, bool) {
	if len(v) > MaxPriorityLen {
		return bulkhead.Normal, false
	}
	p, err := bulkhead.ParsePriority(v)
	return p, err == nil
}

// trusts reports whether the downstream address addr (an IP literal, as
// Envoy reports it) is inside one of the trusted prefixes. Anything else
// (empty, a pipe path, a name) is not trusted.
func (p *Policy) trusts(addr string) bool {
	if len(p.TrustedPrioritySources) == 0 || len(addr) > maxAddrLen {
		return false
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	a = a.WithZone("")
	for _, pre := range p.TrustedPrioritySources {
		if pre.Contains(a) || a.Is4In6() && pre.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// maxAddrLen bounds the address text parsed (the longest IPv6 literal is 45).
const maxAddrLen = 64

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

// tenantOf returns the tenant sub-bulkheads of key and the request's tenant,
// or nil when tenants are off, the bulkhead has no template, or the request
// names no tenant. A value over MaxTenantLen is counted and treated as no
// tenant, as if the header were left out (which any client may do).
func (s *Server) tenantOf(pol *Policy, key string, id string) (*bulkhead.Tenants, string) {
	if pol.TenantHeader == "" || id == "" {
		return nil, ""
	}
	ts := s.bulkheads.Tenants(key)
	if ts != nil && len(id) > MaxTenantLen {
		s.inputs.InvalidInput(bulkhead.InputTenant)
		return nil, ""
	}
	return ts, id
}

func (p *Policy) leaseTTL(key string) time.Duration {
	if d, ok := p.LeaseTTL[key]; ok && d > 0 {
		return d
	}
	return p.DefaultLeaseTTL
}
