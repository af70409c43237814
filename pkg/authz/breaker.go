package authz

import (
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// Breakers says whether a bulkhead's circuit breaker lets a Check through;
// *breaker.Set is one. When it does not, retryAfter is how long until it
// lets requests through again.
type Breakers interface {
	Allow(key string) (ok bool, retryAfter time.Duration)
}

// WithBreakers makes Checks ask b first, before any permit is taken
// (default: no breakers).
func WithBreakers(b Breakers) Option { return func(s *Server) { s.breakers = b } }

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
