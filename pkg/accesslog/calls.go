package accesslog

import (
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// Calls receives how each request whose permit an end entry released ended
// and how long it held its permit; *breaker.Set, through the daemon's
// wiring, is one.
type Calls interface {
	Ended(dependency string, o bulkhead.Outcome, held time.Duration)
}

// WithCalls makes the server tell c of every request an end entry releases
// (default: no one).
func WithCalls(c Calls) Option { return func(s *Server) { s.calls = c } }
