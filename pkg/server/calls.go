package server

import (
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/accesslog"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// calls tells every one of its members of each request the access log
// releases: the circuit breakers and the sizing observer.
type calls []accesslog.Calls

var _ accesslog.Calls = calls(nil)

func (cs calls) Ended(dependency string, o bulkhead.Outcome, held time.Duration) {
	for _, c := range cs {
		c.Ended(dependency, o, held)
	}
}
