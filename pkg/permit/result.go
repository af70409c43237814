package permit

import "fmt"

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
