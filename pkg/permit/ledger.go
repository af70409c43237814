package permit

import "time"

// Ledger is where leases live: the contract every backend keeps (the
// in-memory Memory, and any shared one). Package ledgertest checks it.
//
// A Ledger owns each permit it accepted (Grant, or Adopt) until it releases
// it, exactly once, by one of Release, Sweep (expiry) or Close. A call that
// returns an error did not take the permit: its caller must release it.
type Ledger interface {
	// Grant registers p as a new lease and returns its fresh token.
	Grant(p Releaser, g Grant) (string, error)
	// Adopt registers p under token, a permit the ledger does not hold but
	// whose request is running (its periodic access log says so): after a
	// restart of the daemon, or after its lease expired under it. It fails
	// with ErrLive if token is live and ErrInvalidToken if Grant cannot
	// have issued it.
	Adopt(p Releaser, token string, g Grant) (Lease, error)
	// Release ends token's lease (Released), or says why it could not
	// (Duplicate, Expired, Unknown).
	Release(token string, src Source) (Lease, Result)
	// Renew extends token's live lease to at least ttl from now (Renewed),
	// or says why it could not (Duplicate, Expired, Unknown).
	Renew(token string, ttl time.Duration) (Lease, Result)
	// Sweep ends the leases that expired, with source TTL.
	Sweep() int
	// Holders returns up to max leases of bulkhead, oldest first, and how
	// many it holds in all.
	Holders(bulkhead string, max int) ([]Lease, int)
	// Oldest returns, per bulkhead with leases, when its oldest was acquired.
	Oldest() map[string]time.Time
	// Len is the number of live leases.
	Len() int
	// Close ends every lease with source src and refuses later grants.
	Close(src Source) int
}

var _ Ledger = (*Memory)(nil)
