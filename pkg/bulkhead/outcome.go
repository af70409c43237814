package bulkhead

// Outcome is how an admitted call ended, as its caller reports it: the
// access-log server for requests through Envoy, the in-process isolation
// packages for local calls. Metrics count it per bulkhead.
type Outcome uint8

// The outcomes.
const (
	// Success: the call completed without an upstream failure.
	Success Outcome = iota
	// Failure: a 5xx, a reset or a timeout of the upstream, or no answer.
	Failure
	// Aborted: the caller went away before the answer was complete.
	Aborted
)
