package bulkhead

import "errors"

// Reason says why a request was not admitted. The set is closed so that it
// can be a metric label.
type Reason uint8

// The rejection reasons. ReasonNone is the zero value and never reported.
const (
	ReasonNone Reason = iota
	// ReasonQueueFull: the queue was full and held no waiter of a lower class.
	ReasonQueueFull
	// ReasonShed: the waiter was evicted by a higher-class arrival, or by a
	// queue shrink.
	ReasonShed
	// ReasonTimeout: the waiter was not granted within max_wait (or before
	// the caller's deadline, as the caller reports it).
	ReasonTimeout
	// ReasonUnknownBulkhead: no such bulkhead, or it was removed.
	ReasonUnknownBulkhead
	// ReasonCircuitOpen: reserved for a circuit breaker.
	ReasonCircuitOpen
	// ReasonLedgerUnavailable: the shared ledger (Redis) did not answer and
	// the replica's policy is fail_closed.
	ReasonLedgerUnavailable

	numReasons = 7
)

// Reasons lists every reason that can be reported (without ReasonNone).
func Reasons() []Reason {
	return []Reason{ReasonQueueFull, ReasonShed, ReasonTimeout, ReasonUnknownBulkhead, ReasonCircuitOpen, ReasonLedgerUnavailable}
}

var reasonNames = [numReasons]string{"none", "queue_full", "shed", "timeout", "unknown_bulkhead", "circuit_open", "ledger_unavailable"}

// String returns the metric label of the reason.
func (r Reason) String() string {
	if int(r) < numReasons {
		return reasonNames[r]
	}
	return "invalid"
}

// Rejection is the error type of every rejection. The exported sentinels are
// its only values, so errors.Is works by identity and errors.As gives the
// Reason.
type Rejection struct {
	reason Reason
	msg    string
}

func (r *Rejection) Error() string { return r.msg }

// Reason returns why the request was rejected.
func (r *Rejection) Reason() Reason { return r.reason }

// Sentinel errors. Each rejection error carries its Reason; use ReasonOf.
var (
	ErrQueueFull = &Rejection{ReasonQueueFull, "bulkhead: queue full"}
	ErrShed      = &Rejection{ReasonShed, "bulkhead: shed by a higher-priority request"}
	ErrTimeout   = &Rejection{ReasonTimeout, "bulkhead: timed out waiting for a permit"}
	ErrClosed    = &Rejection{ReasonUnknownBulkhead, "bulkhead: closed"}
	// ErrLedgerUnavailable is the rejection of a Check that the shared
	// ledger could not decide, under the fail_closed policy.
	ErrLedgerUnavailable = &Rejection{ReasonLedgerUnavailable, "bulkhead: shared ledger unavailable"}

	// ErrUnknownPriority is returned by ParsePriority.
	ErrUnknownPriority = errors.New("unknown priority")
	// ErrInvalidSettings wraps every problem found by Settings.Validate.
	ErrInvalidSettings = errors.New("invalid bulkhead settings")
)

// ReasonOf returns the rejection reason carried by err, or ReasonNone when
// err is not a rejection (for example a context error).
func ReasonOf(err error) Reason {
	var r *Rejection
	if errors.As(err, &r) {
		return r.reason
	}
	return ReasonNone
}
