package redisledger

import (
	"context"
	"errors"
	"sort"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// The Redis ledger keeps the admission contract; Fallback wraps it with
// the unavailable policy, and is what the servers are given.
var _ admission.Ledger = (*Ledger)(nil)

// Admit implements admission.Ledger: Acquire in the bulkhead's global
// queue, each decision also counted in the limiter's own counters
// (bulkhead.Limiter.CountShared), so that this replica's statuses cover
// what it served. Its errors wrap admission.ErrUnavailable when Redis
// cannot decide.
func (l *Ledger) Admit(ctx context.Context, r admission.Request) (admission.Admitted, error) {
	lim := r.Bulkhead
	name := lim.Name()
	req := Request{Bulkhead: name, Priority: r.Priority, Settings: lim.Settings(), Node: r.Node, Deadline: r.Deadline,
		TTL: r.Lease}
	if r.Tenants != nil && r.Tenant != "" {
		tmpl := r.Tenants.Template()
		req.Tenant, req.TenantSettings, req.MaxTenants = r.Tenant, &tmpl, r.Tenants.Max()
	}
	token, err := l.Acquire(ctx, req)
	if err == nil {
		if err := ctx.Err(); err != nil {
			// Granted, but nobody waits for the answer.
			l.ReleaseToken(name, token, permit.Cancel)
			lim.CountShared(r.Priority, bulkhead.ReasonNone, true)
			return admission.Admitted{}, err
		}
		lim.CountShared(r.Priority, bulkhead.ReasonNone, false)
		return admission.Admitted{Token: token}, nil
	}
	if reason := bulkhead.ReasonOf(err); reason != bulkhead.ReasonNone {
		lim.CountShared(r.Priority, reason, false)
		return admission.Admitted{}, err
	}
	if !errors.Is(err, ErrUnavailable) && ctx.Err() != nil {
		lim.CountShared(r.Priority, bulkhead.ReasonNone, true)
		return admission.Admitted{}, ctx.Err()
	}
	return admission.Admitted{}, err
}

// Release implements admission.Ledger: the release joins the next
// pipeline (ReleaseAsync). An entry naming no configured bulkhead never
// reaches Redis (Unknown); while Redis is unreachable the answer is
// Unavailable at once.
func (l *Ledger) Release(e admission.Entry, done admission.Done) {
	if !l.serves(e, done) {
		return
	}
	l.ReleaseAsync(e.Bulkhead, e.Token, permit.AccessLog, done)
}

// Renew implements admission.Ledger as Release does: the renewal (or the
// adoption, which the renew script decides) joins the next pipeline.
func (l *Ledger) Renew(e admission.Entry, done admission.Done) {
	if !l.serves(e, done) {
		return
	}
	l.RenewAsync(e.Bulkhead, e.Token, l.cfg.Heartbeat.TTL, e.Node, false, done)
}

// serves reports whether e goes to Redis, or answers done itself.
func (l *Ledger) serves(e admission.Entry, done admission.Done) bool {
	switch {
	case l.cfg.Known != nil && !l.cfg.Known(e.Bulkhead):
		done(permit.Lease{}, permit.Unknown)
		return false
	case !l.Reachable():
		done(permit.Lease{}, permit.Unavailable)
		return false
	}
	return true
}

// Holders implements admission.Ledger: the leases of bulkhead held across
// every replica, read from Redis (none while it does not answer).
func (l *Ledger) Holders(name string, max int) ([]permit.Lease, int) {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Timeout)
	defer cancel()
	var info *redis.MapStringStringCmd
	var now *redis.TimeCmd
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		info = p.HGetAll(ctx, l.keysOf(name)[keyInfo])
		return nil
	})
	if err != nil {
		return nil, 0
	}
	at := now.Val().UnixMilli()
	leases := make([]permit.Lease, 0, len(info.Val()))
	for token, v := range info.Val() {
		leases = append(leases, leaseOf(name, token, v, at))
	}
	sort.Slice(leases, func(i, j int) bool { return leases[i].Acquired.Before(leases[j].Acquired) })
	n := len(leases)
	return leases[:min(max, n)], n
}
