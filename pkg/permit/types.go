package permit

import (
	"errors"
	"fmt"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// Errors returned by Grant.
var (
	// ErrFull means the ledger holds its maximum number of leases. The
	// caller still owns the permit: it must release it and deny the request.
	ErrFull = errors.New("permit ledger full")
	// ErrClosed means Close has been called. The caller still owns the permit.
	ErrClosed = errors.New("permit ledger closed")
	// ErrInvalidGrant means the grant has no permit or a TTL <= 0. The caller
	// still owns the permit.
	ErrInvalidGrant = errors.New("invalid permit grant")
	// ErrInvalidToken means Adopt was given a token that Grant cannot have
	// issued. The caller still owns the permit.
	ErrInvalidToken = errors.New("invalid permit token")
	// ErrLive means Adopt was given the token of a live lease: the request is
	// already counted. The caller still owns the permit.
	ErrLive = errors.New("permit token already live")
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

// Source says what ended a lease. It is a closed set, used as a metric label.
type Source uint8

// The sources of a release.
const (
	// AccessLog: Envoy's access log for the request arrived.
	AccessLog Source = iota
	// TTL: the lease expired before any release.
	TTL
	// Cancel: the Check was cancelled after the permit was granted.
	Cancel
	// Shutdown: the ledger was closed.
	Shutdown

	numSources = 4
)

var sourceNames = [numSources]string{"access_log", "ttl", "cancel", "shutdown"}

// Sources lists every source.
func Sources() []Source { return []Source{AccessLog, TTL, Cancel, Shutdown} }

// String returns the source's metric name.
func (s Source) String() string {
	if int(s) < numSources {
		return sourceNames[s]
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}

// Result is the outcome of Release.
type Result uint8

// The outcomes of Release.
const (
	// Released: the call ended the lease and released its permit.
	Released Result = iota
	// Duplicate: the lease had already ended (and its token is still
	// remembered); nothing was released.
	Duplicate
	// Unknown: the token was malformed, never issued, or ended too long ago
	// to be remembered; nothing was released.
	Unknown
	// Expired: like Duplicate, but the lease had ended by expiry (source
	// TTL): its request was still running when it was reclaimed, or its
	// end was reported late.
	Expired
	// Renewed: Renew extended the live lease.
	Renewed

	numResults = 5
)

var resultNames = [numResults]string{"released", "duplicate", "unknown", "expired", "renewed"}

// String returns the result's metric name.
func (r Result) String() string {
	if int(r) < numResults {
		return resultNames[r]
	}
	return fmt.Sprintf("result(%d)", uint8(r))
}

// Observer is told about every lease that ends and every release that did
// nothing, e.g. to count them. Its methods are called outside ledger locks,
// possibly from many goroutines at once, and must not block for long.
type Observer interface {
	// Ended is called once per lease, after its permit was released, with
	// the time the ledger ended it.
	Ended(l Lease, src Source, at time.Time)
	// Ignored is called for a Release that released nothing (r is
	// Duplicate, Expired or Unknown).
	Ignored(src Source, r Result)
}

type nopObserver struct{}

func (nopObserver) Ended(Lease, Source, time.Time) {}
func (nopObserver) Ignored(Source, Result)         {}
