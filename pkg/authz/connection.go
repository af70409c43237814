package authz

import "github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"

// LabelPriority is the Envoy node metadata label that names the class of
// the connections that Envoy opens (critical, normal or best_effort). The
// network ext_authz filter sends the node's labels as the Check's
// destination labels when its bootstrap_metadata_labels_key names the
// metadata field that holds them. A label is the operator's (set in the
// Envoy's bootstrap, one per workload), never a client's, so it may raise
// the class as well as lower it.
const LabelPriority = "bulkhead_priority"

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
