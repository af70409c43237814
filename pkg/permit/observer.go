package permit

import "time"

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
