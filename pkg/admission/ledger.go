package admission

import (
	"context"
	"errors"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// Ledger is the contract between the two Envoy-facing servers and the
// backend that decides admissions and keeps their permits: the Check
// server admits through it, the access-log server releases and renews
// through it, and neither knows which backend it talks to. Memory is the
// in-process backend; the Redis ledger (package redisledger) is the one
// many replicas share. Package admissiontest is the contract as a test
// suite, run against every backend.
//
// Implementations are safe for concurrent use. Every method returns at
// once except Admit, which may wait in the bulkhead's queue until the
// request's deadline.
type Ledger interface {
	// Admit takes a permit for r, waiting in the bulkhead's queue at most
	// until r.Deadline or until ctx ends. A denial is an error for which
	// bulkhead.ReasonOf is not ReasonNone (an answer, not a failure); an
	// error that carries no reason means the backend cannot decide (ctx
	// ended, the ledger is full or unreachable: its errors wrap
	// ErrUnavailable). A permit granted after ctx ended is given back
	// (source permit.Cancel) and Admit returns ctx's error: nobody waits
	// for the answer, and no access log will carry the token.
	Admit(ctx context.Context, r Request) (Admitted, error)
	// Release ends the permit e names: its request ended. Renew keeps it
	// alive (its request runs), and adopts it when the ledger does not
	// hold it: the daemon restarted since the grant, the store lost it, or
	// its lease expired while the request ran. Each calls done exactly
	// once with the lease and the result (one of the entry results of
	// permit.Result), possibly before it returns and possibly on another
	// goroutine: a backend may batch the entries of a stream.
	Release(e Entry, done Done)
	Renew(e Entry, done Done)
	// Holders returns up to max leases of bulkhead, oldest first, and how
	// many it holds in all.
	Holders(bulkhead string, max int) ([]permit.Lease, int)
}

// Done receives the result of Release or Renew, exactly once. It is an
// interface, not a func, so that a caller can hand in a pooled value and
// an entry costs no closure.
type Done interface {
	Done(permit.Lease, permit.Result)
}

// DoneFunc is a func as a Done.
type DoneFunc func(permit.Lease, permit.Result)

// Done implements Done.
func (f DoneFunc) Done(l permit.Lease, r permit.Result) { f(l, r) }

// Request is one admission asked of the ledger: everything a Check
// decided about its request before it asks for a permit.
type Request struct {
	// Bulkhead is the limiter of the bulkhead as this process configures
	// it: its name, its settings, its counters.
	Bulkhead *bulkhead.Limiter
	Priority bulkhead.Priority
	// Tenants is the bulkhead's tenant compartments and Tenant the
	// request's tenant; nil and "" when the request has none.
	Tenants *bulkhead.Tenants
	Tenant  string
	// Lease is the permit's first lease (> 0).
	Lease time.Duration
	// Node is the Envoy node that asks ("" when unknown): the permit's
	// holder.
	Node string
	// Deadline bounds the wait in the queue (zero: none but ctx).
	Deadline time.Time
}

// Admitted is an admitted Check: the token of its permit, or, with
// Unguarded, no permit at all (the backend could not decide and its
// policy lets such Checks through: ledger.on_unavailable fail_open).
type Admitted struct {
	Token     string
	Unguarded bool
}

// Entry is what an access-log entry tells the ledger of one permit.
type Entry struct {
	// Bulkhead is the bulkhead the entry names next to the token (from the
	// permit's dynamic metadata; any bytes): a shared backend finds the
	// lease by it, and adoption counts the request in it. It points into
	// the access-log message and is valid during the call only: a backend
	// that keeps it copies it (string(Bulkhead)); the in-memory backend
	// needs it only to adopt.
	Bulkhead []byte
	Token    string
	// Node is the entry's Envoy node when it is a valid node id, else "".
	Node string
}

// ErrUnavailable is wrapped by the errors of a backend that cannot reach
// its store: the unavailable policy applies.
var ErrUnavailable = errors.New("ledger unavailable")
