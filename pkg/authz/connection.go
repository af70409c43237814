package authz

import "github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"

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
