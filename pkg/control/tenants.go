package control

import "github.com/bulkhead-mesh/bulkhead/pkg/config"

// applyTenants gives bulkhead name the tenant template of the file, or
// removes its tenants when the file has none or tenants are off. Live
// tenants are resized in place. The admin API does not change templates.
func (c *Control) applyTenants(cfg *config.Config, name string) error {
	tmpl := cfg.Bulkheads[name].Tenant
	if cfg.Authz.TenantHeader == "" {
		tmpl = nil
	}
	return c.reg.SetTenants(name, tmpl, cfg.Limits.MaxTenants)
}
