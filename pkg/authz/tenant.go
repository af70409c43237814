package authz

import "github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"

// MaxTenantLen bounds the tenant header value, in bytes. A longer value is
// ignored (the request is treated as naming no tenant, as if it had left
// the header out) and counted as bulkhead.InputTenant.
const MaxTenantLen = 128

// tenantOf returns the tenant sub-bulkheads of key and the request's tenant,
// or nil when tenants are off, the bulkhead has no template, or the request
// names no tenant. A value over MaxTenantLen is counted and treated as no
// tenant, as if the header were left out (which any client may do).
func (s *Server) tenantOf(pol *Policy, key string, id string) (*bulkhead.Tenants, string) {
	if pol.TenantHeader == "" || id == "" {
		return nil, ""
	}
	ts := s.bulkheads.Tenants(key)
	if ts != nil && len(id) > MaxTenantLen {
		s.inputs.InvalidInput(bulkhead.InputTenant)
		return nil, ""
	}
	return ts, id
}
