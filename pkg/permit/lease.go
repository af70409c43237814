package permit

import (
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// Releaser is the permit the ledger holds: bulkhead.Permit satisfies it.
// Release gives the permit back; the ledger calls it exactly once and does
// not interpret its result (false reports a duplicate release elsewhere).
type Releaser interface {
	Release() bool
}

// Grant describes a permit being registered.
type Grant struct {
	// Bulkhead is the name of the bulkhead the permit belongs to.
	Bulkhead string
	// Priority is the class the permit was admitted in.
	Priority bulkhead.Priority
	// TTL bounds how long the lease lives without a release; it must be > 0.
	TTL time.Duration
	// Node is the holder (the Envoy node id), or "" when unknown: shown to
	// operators, never used to end a lease.
	Node string
}

// Lease is a registered permit as the ledger saw it.
type Lease struct {
	Token    string
	Bulkhead string
	Node     string
	Priority bulkhead.Priority
	// Acquired is when the ledger granted or adopted the permit.
	Acquired time.Time
	// Expires is when the lease ends unless it is renewed or released.
	Expires time.Time
	// Renewed is the last renewal (zero: never renewed).
	Renewed time.Time
	// Adopted: the ledger learnt of the permit from its request's periodic
	// access log (Adopt), not from a Grant; Priority is then unknown and
	// reads Normal.
	Adopted bool
}
