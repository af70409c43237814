package permit

import "errors"

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
