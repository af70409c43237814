package redisledger

import (
	"context"
	"errors"
	"math"
	"time"

	"golang.org/x/sync/errgroup"

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
// (ledger.on_unavailable), in one place: it is the admission.Ledger the
// servers are given. While Redis decides, it passes everything through.
// When Redis cannot decide a Check, FailClosed rejects it (reason
// ledger_unavailable), FailOpen admits it without a permit, and LocalShare
// admits it from this replica's share of the limit (Ledger.Share, with its
// reserves), once the others hold that share back, its permits kept in
// this process (leases) and handed to Redis when it answers again.
// Releases and renewals of those permits are served here. Safe for
// concurrent use.
type Fallback struct {
	ledger *Ledger
	policy admission.UnavailablePolicy
	rec    FallbackRecorder
	// shares are the bulkheads at this replica's share of each limit;
	// alone admits from them and registers in leases, while the ledger
	// lets this replica admit alone (Ledger.AdmitAlone).
	shares *bulkhead.Registry
	leases *permit.Memory
	alone  *admission.Memory
}

// Both keep the admission contract; the servers are given the Fallback.
var (
	_ admission.Ledger = (*Ledger)(nil)
	_ admission.Ledger = (*Fallback)(nil)
)

// NewFallback wraps l with policy; leases keeps the permits admitted alone
// (LocalShare), and its owner sweeps it.
func NewFallback(l *Ledger, policy admission.UnavailablePolicy, leases *permit.Memory, rec FallbackRecorder) *Fallback {
	f := &Fallback{ledger: l, policy: policy, rec: rec, shares: bulkhead.NewRegistry(), leases: leases}
	f.alone = admission.NewMemory(f.shares, leases, l.cfg.Heartbeat, admission.WithRegisterGuard(l.AdmitAlone))
	return f
}

// Admit implements admission.Ledger.
func (f *Fallback) Admit(ctx context.Context, r admission.Request) (admission.Admitted, error) {
	a, err := f.ledger.Admit(ctx, r)
	if !errors.Is(err, admission.ErrUnavailable) {
		return a, err
	}
	name := r.Bulkhead.Name()
	switch f.policy {
	case admission.FailOpen:
		f.rec.FailOpen(name)
		return admission.Admitted{Unguarded: true}, nil
	case admission.LocalShare:
		if share := f.shares.Get(name); share != nil && f.ledger.LocalShareOK() {
			local := r
			local.Bulkhead = share
			if r.Tenants != nil {
				local.Tenants = f.shares.Tenants(name)
			}
			a, err := f.alone.Admit(ctx, local)
			if !errors.Is(err, admission.ErrNotRegistered) {
				return a, err
			}
			// The hand-over to Redis began meanwhile.
		}
	}
	r.Bulkhead.Count(r.Priority, bulkhead.ReasonLedgerUnavailable, false)
	return admission.Admitted{}, bulkhead.ErrLedgerUnavailable
}

// Share returns the limiter of bulkhead name's local share, nil when it
// has none (its share cannot hold a best_effort permit, or the shares were
// not sized yet).
func (f *Fallback) Share(name string) *bulkhead.Limiter { return f.shares.Get(name) }

// Release implements admission.Ledger: a permit admitted alone is
// released here, any other in Redis.
func (f *Fallback) Release(e admission.Entry, done admission.Done) {
	if f.leases.Len() > 0 {
		if lease, res := f.leases.Release(e.Token, permit.AccessLog); res == permit.Released {
			done.Done(lease, res)
			return
		}
	}
	f.ledger.Release(e, done)
}

// Renew implements admission.Ledger as Release does.
func (f *Fallback) Renew(e admission.Entry, done admission.Done) {
	if f.leases.Len() > 0 {
		if lease, res := f.leases.Renew(e.Token, f.ledger.cfg.Heartbeat.TTL); res == permit.Renewed {
			done.Done(lease, res)
			return
		}
	}
	f.ledger.Renew(e, done)
}

// Holders implements admission.Ledger: the permits admitted alone, then
// Redis's.
func (f *Fallback) Holders(name string, max int) ([]permit.Lease, int) {
	local, n := f.leases.Holders(name, max)
	shared, m := f.ledger.Holders(name, max-len(local))
	return append(local, shared...), n + m
}

// Run keeps the ledger (Ledger.Run) and the local shares going until ctx
// ends; reg is the configured bulkheads.
func (f *Fallback) Run(ctx context.Context, reg *bulkhead.Registry) error {
	var g errgroup.Group
	g.Go(func() error {
		// The shares follow the limits and the replica count.
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			f.syncShares(reg)
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
	g.Go(func() error {
		return f.ledger.Run(ctx, reg.Keys, func(ctx context.Context) error { return f.handover(ctx, reg) })
	})
	return g.Wait()
}

// syncShares sizes each bulkhead's share (Ledger.Share), with its
// reserves; a bulkhead whose share cannot hold a best_effort permit gets
// none (its Checks are rejected while Redis does not answer).
func (f *Fallback) syncShares(reg *bulkhead.Registry) {
	want := map[string]bulkhead.Settings{}
	for _, snap := range reg.Snapshots() {
		if st := f.ledger.Share(snap.Name, snap.Settings); st.Validate() == nil {
			want[snap.Name] = st
		}
	}
	if _, err := f.shares.Apply(want); err != nil {
		f.ledger.log.Warn("local shares not resized", "err", err)
	}
}

// minHandoverLease is the shortest lease a permit admitted alone is handed
// over with: one whose local lease is about to end still reaches Redis.
const minHandoverLease = time.Second

// handover moves the permits this replica admitted while Redis did not
// answer into Redis, counted there past the limit if need be (their
// requests run), before strict admission resumes. No permit is admitted
// alone meanwhile (Ledger.AdmitAlone): a slot that a permit handed over
// frees in the local share goes to no one, and passes repeat until one
// finds nothing left. Each permit keeps the time left on its lease: the
// heartbeat TTL would let Redis reclaim a long lease (heartbeats off, or a
// silent node) while its request runs.
func (f *Fallback) handover(ctx context.Context, reg *bulkhead.Registry) error {
	moved := 0
	for {
		n, err := f.handoverPass(ctx, reg)
		moved += n
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	if moved > 0 {
		f.ledger.log.Info("permits admitted without redis handed over to it", "permits", moved)
	}
	return nil
}

// handoverPass hands over the local permits of each bulkhead of reg and
// returns how many it found.
func (f *Fallback) handoverPass(ctx context.Context, reg *bulkhead.Registry) (int, error) {
	found := 0
	for _, name := range reg.Keys() {
		leases, _ := f.leases.Holders(name, math.MaxInt32)
		for _, lease := range leases {
			if ctx.Err() != nil {
				return found, ctx.Err()
			}
			ttl := max(time.Until(lease.Expires), minHandoverLease)
			if _, res := f.ledger.RenewToken(name, lease.Token, ttl, lease.Node, true); res == permit.Unavailable {
				return found, errors.New("redis did not answer during the hand-over")
			}
			if _, res := f.leases.Release(lease.Token, permit.Handover); res != permit.Released {
				// Its request ended after the look (its end entry
				// released it here): end what Redis now holds.
				f.ledger.ReleaseToken(name, lease.Token, permit.Handover)
			}
			found++
		}
	}
	return found, nil
}
