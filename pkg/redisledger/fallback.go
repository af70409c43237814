package redisledger

import (
	"context"
	"errors"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// FallbackRecorder counts what only the unavailable policy does;
// *metrics.Metrics is one.
type FallbackRecorder interface {
	// FailOpen counts a Check admitted without a permit because Redis did
	// not answer.
	FailOpen(dependency string)
}

// Fallback is the Redis ledger under its unavailable policy
// (ledger.on_unavailable), in one place: the per-request path the servers
// are given, directly or under the capacity leases (Capacity). While Redis
// decides, it passes everything through. When Redis cannot decide a Check,
// FailClosed rejects it (reason ledger_unavailable) and FailOpen admits it
// without a permit. What a replica cut off from Redis admits within the
// capacity lease it holds never reaches the Fallback: the policy is what
// lies beyond the lease. Safe for concurrent use.
type Fallback struct {
	ledger *Ledger
	policy admission.UnavailablePolicy
	rec    FallbackRecorder
}

// Both keep the admission contract; the servers are given the Fallback.
var (
	_ admission.Ledger = (*Ledger)(nil)
	_ admission.Ledger = (*Fallback)(nil)
)

// NewFallback wraps l with policy.
func NewFallback(l *Ledger, policy admission.UnavailablePolicy, rec FallbackRecorder) *Fallback {
	return &Fallback{ledger: l, policy: policy, rec: rec}
}

// Admit implements admission.Ledger.
func (f *Fallback) Admit(ctx context.Context, r admission.Request) (admission.Admitted, error) {
	a, err := f.ledger.Admit(ctx, r)
	if !errors.Is(err, admission.ErrUnavailable) {
		return a, err
	}
	if f.policy == admission.FailOpen {
		f.rec.FailOpen(r.Bulkhead.Name())
		return admission.Admitted{Unguarded: true}, nil
	}
	r.Bulkhead.Count(r.Priority, bulkhead.ReasonLedgerUnavailable, false)
	return admission.Admitted{}, bulkhead.ErrLedgerUnavailable
}

// Release implements admission.Ledger.
func (f *Fallback) Release(e admission.Entry, done admission.Done) { f.ledger.Release(e, done) }

// Renew implements admission.Ledger.
func (f *Fallback) Renew(e admission.Entry, done admission.Done) { f.ledger.Renew(e, done) }

// Holders implements admission.Ledger.
func (f *Fallback) Holders(name string, max int) ([]permit.Lease, int) {
	return f.ledger.Holders(name, max)
}

// Run keeps the ledger going (Ledger.Run) until ctx ends; reg is the
// configured bulkheads.
func (f *Fallback) Run(ctx context.Context, reg *bulkhead.Registry) error {
	return f.ledger.Run(ctx, reg.Keys)
}
