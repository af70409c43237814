package control

import "errors"

// ErrNotFound: no bulkhead of that name.
var ErrNotFound = errors.New("no such bulkhead")
