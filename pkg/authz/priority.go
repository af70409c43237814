package authz

import (
	"net/netip"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// MaxPriorityLen bounds a priority value (header or context_extensions) that
// is parsed; a longer one is invalid without being looked at.
const MaxPriorityLen = 32

// InputRecorder counts request inputs the server distrusted or ignored. It
// is optional (WithInputRecorder); label values are configured bulkhead
// names and the bulkhead.Input constants only.
type InputRecorder interface {
	// UntrustedPriority counts a priority header that would have raised a
	// request's class above the route's (or the default) from a source
	// outside Policy.TrustedPrioritySources; the route's class was used.
	UntrustedPriority(dependency string)
	// InvalidInput counts an ignored value of input (bulkhead.InputTenant, bulkhead.InputNode).
	InvalidInput(input bulkhead.Input)
}

// WithInputRecorder sets the recorder of distrusted and ignored inputs
// (default: none).
func WithInputRecorder(r InputRecorder) Option {
	return func(s *Server) {
		if r != nil {
			s.inputs = r
		}
	}
}

type nopInputs struct{}

func (nopInputs) UntrustedPriority(string)    {}
func (nopInputs) InvalidInput(bulkhead.Input) {}

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
