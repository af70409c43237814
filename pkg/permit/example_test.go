package permit_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// A lease's life in the lease store (on a fake clock): a
// granted permit is renewed by its request's periodic access log, expires
// when nothing renews it, is adopted when the log shows its request still
// runs, and is released by the final access log, exactly once.
func ExampleMemory() {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	ledger := permit.NewMemory(clk)
	limiter, err := bulkhead.New("catalog", bulkhead.Settings{MaxConcurrent: 2})
	if err != nil {
		panic(err)
	}
	take := func() bulkhead.Permit {
		p, err := limiter.TryAcquire(bulkhead.Normal)
		if err != nil {
			panic(err)
		}
		return p
	}
	g := permit.Grant{Bulkhead: "catalog", Priority: bulkhead.Normal, TTL: 30 * time.Second, Node: "envoy-1"}

	// Grant: the ledger now owns the permit, under a fresh token.
	token, err := ledger.Grant(take(), g)
	if err != nil {
		panic(err)
	}
	fmt.Println("leases:", ledger.Len(), "in use:", limiter.Snapshot().InUse)

	// Renew: a periodic access log 20 s later extends the lease.
	clk.Advance(20 * time.Second)
	lease, res := ledger.Renew(token, 30*time.Second)
	fmt.Println(res, "- expires after", lease.Expires.Sub(start))

	// Sweep: with no renewal, the lease ends by expiry and its permit is
	// given back.
	clk.Advance(31 * time.Second)
	fmt.Println("swept:", ledger.Sweep(), "in use:", limiter.Snapshot().InUse)
	_, res = ledger.Renew(token, 30*time.Second)
	fmt.Println("renew after expiry:", res)

	// Adopt: a later periodic log shows the request still runs; the ledger
	// takes a new permit for it under the same token. Twice is refused.
	lease, err = ledger.Adopt(take(), token, g)
	fmt.Println("adopted:", lease.Adopted, err)
	extra := take()
	_, err = ledger.Adopt(extra, token, g)
	fmt.Println("adopt again:", errors.Is(err, permit.ErrLive))
	extra.Release() // a failed Adopt leaves the permit with its caller

	// Release: the final access log ends the lease, exactly once.
	_, res = ledger.Release(token, permit.AccessLog)
	fmt.Println(res, "- leases:", ledger.Len(), "in use:", limiter.Snapshot().InUse)
	_, res = ledger.Release(token, permit.AccessLog)
	fmt.Println("again:", res)
	// Output:
	// leases: 1 in use: 1
	// renewed - expires after 50s
	// swept: 1 in use: 0
	// renew after expiry: expired
	// adopted: true <nil>
	// adopt again: true
	// released - leases: 0 in use: 0
	// again: duplicate
}
