package permit

import "fmt"

// Result is the outcome of Release and Renew, in a ledger and through the
// admission contract (package admission): one type for every backend.
type Result uint8

// The outcomes of Release and Renew.
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
	// Adopted: a renewal found no lease for the token and registered the
	// running request's permit under it (the daemon restarted since the
	// grant, or the store lost it).
	Adopted
	// AdoptedExpired: like Adopted, but the lease had ended by expiry
	// while its request ran (its Envoy, or the stream, stalled for longer
	// than the TTL).
	AdoptedExpired
	// Late: a renewal of a permit whose request has ended (its periodic
	// entry came after its end entry); nothing was renewed or adopted.
	Late
	// Unavailable: the backend could not reach its store; nothing is known
	// of the lease (a release ends by expiry, a renewal is adopted by a
	// later entry).
	Unavailable
	// Forwarded: the shared ledger did not know the token and passed the
	// entry to the replicas that hold capacity leases, one of which may
	// have admitted its permit from its lease and serves it.
	Forwarded

	numResults = 10
)

var resultNames = [numResults]string{"released", "duplicate", "unknown", "expired", "renewed", "adopted", "adopted_expired", "late",
	"unavailable", "forwarded"}

// String returns the result's metric name.
func (r Result) String() string {
	if int(r) < numResults {
		return resultNames[r]
	}
	return fmt.Sprintf("result(%d)", uint8(r))
}
