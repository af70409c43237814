package callmetrics

import (
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
)

// Recorder is the part of *metrics.Metrics an Observer uses.
type Recorder interface {
	// Waited records the wait of an admitted call.
	Waited(dependency string, d time.Duration)
	// Outcome records how an admitted call ended.
	Outcome(dependency string, o bulkhead.Outcome)
}

// HoldRecorder is a Recorder that can also record permit hold times. When
// the Recorder given to New is one, hold times are recorded too.
type HoldRecorder interface {
	Recorder
	Held(dependency string, d time.Duration)
}

// Observer is an isolation.Observer recording into a Recorder.
type Observer struct {
	r    Recorder
	hold HoldRecorder // nil when r cannot record hold times
}

var _ isolation.Observer = (*Observer)(nil)

// New returns an Observer recording into r, typically a *metrics.Metrics.
func New(r Recorder) *Observer {
	o := &Observer{r: r}
	if h, ok := r.(HoldRecorder); ok {
		o.hold = h
	}
	return o
}

// Admitted records the wait of an admitted call.
func (o *Observer) Admitted(dependency string, wait time.Duration) { o.r.Waited(dependency, wait) }

// Finished records a call's outcome (success or failure) and, when the
// Recorder can, how long it held its permit.
func (o *Observer) Finished(dependency string, hold time.Duration, failed bool) {
	if failed {
		o.r.Outcome(dependency, bulkhead.Failure)
	} else {
		o.r.Outcome(dependency, bulkhead.Success)
	}
	if o.hold != nil {
		o.hold.Held(dependency, hold)
	}
}
