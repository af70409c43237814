package server

import (
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/accesslog"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// peakInterval is how often the sizing observer samples each bulkhead's
// peak of permits in use.
const peakInterval = 250 * time.Millisecond

// calls tells every one of its members of each request the access log
// releases: the circuit breakers and the sizing observer.
type calls []accesslog.Calls

var _ accesslog.Calls = calls(nil)

func (cs calls) Ended(dependency string, o bulkhead.Outcome, held time.Duration) {
	for _, c := range cs {
		c.Ended(dependency, o, held)
	}
}
