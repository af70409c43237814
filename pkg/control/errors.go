package control

import "errors"

// ErrNotFound means that no bulkhead has that name.
var ErrNotFound = errors.New("no such bulkhead")
