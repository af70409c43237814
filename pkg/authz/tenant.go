package authz

import (
	"context"
	"errors"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// MaxTenantLen bounds the tenant header value, in bytes. A longer value is
// ignored (the request is treated as naming no tenant, as if it had left
// the header out) and counted as InputTenant.
const MaxTenantLen = 128

// acquire takes the permit for a Check: from the tenant's sub-bulkhead
// first when the bulkhead has tenants and the request names one, then from
// the bulkhead itself. A tenant waiting for its own compartment holds
// nothing of the shared one, so a flooding tenant queues (and is rejected)
// in its own compartment while others go straight to the bulkhead.
func (s *Server) acquire(ctx context.Context, pol *Policy, bh Bulkheads, l *bulkhead.Limiter, key string,
	tenant string, prio bulkhead.Priority, deadline time.Time) (permit.Releaser, error) {
	var tp bulkhead.Permit
	if ts, id := s.tenantOf(pol, bh, key, tenant); ts != nil {
		var err error
		if tp, err = acquireTenant(ctx, ts, id, prio, deadline); err != nil {
			return nil, err
		}
	}
	p, err := l.AcquireBefore(ctx, prio, deadline)
	if err != nil {
		tp.Release()
		return nil, err
	}
	if !tp.Valid() {
		return p, nil
	}
	return pair{tenant: tp, bulkhead: p}, nil
}

// tenantOf returns the tenant sub-bulkheads of key and the request's tenant,
// or nil when tenants are off, the bulkhead has no template, or the request
// names no tenant. A value over MaxTenantLen is counted and treated as no
// tenant, as if the header were left out (which any client may do).
func (s *Server) tenantOf(pol *Policy, bh Bulkheads, key string, id string) (*bulkhead.Tenants, string) {
	if pol.TenantHeader == "" || id == "" {
		return nil, ""
	}
	ts := bh.Tenants(key)
	if ts != nil && len(id) > MaxTenantLen {
		s.inputs.InvalidInput(InputTenant)
		return nil, ""
	}
	return ts, id
}

func acquireTenant(ctx context.Context, ts *bulkhead.Tenants, id string, prio bulkhead.Priority, deadline time.Time) (bulkhead.Permit, error) {
	for range 3 {
		tl, err := ts.Get(id)
		if err != nil {
			return bulkhead.Permit{}, err
		}
		p, err := tl.AcquireBefore(ctx, prio, deadline)
		if !errors.Is(err, bulkhead.ErrClosed) {
			return p, err
		}
		// The idle tenant was evicted between Get and acquire: get it anew.
	}
	return bulkhead.Permit{}, bulkhead.ErrTooManyTenants
}

// pair is a permit of a tenant's sub-bulkhead and of its bulkhead, released
// together.
type pair struct{ tenant, bulkhead bulkhead.Permit }

func (p pair) Release() bool {
	p.tenant.Release()
	return p.bulkhead.Release()
}
