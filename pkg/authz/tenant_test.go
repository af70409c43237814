package authz

import (
	"context"
	"strings"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// A flooding tenant fills only its own compartment: the quiet tenant (and
// requests naming no tenant) still get the bulkhead's remaining permits,
// and releasing by token gives back both levels.
func TestCheckTenants(t *testing.T) {
	pol := DefaultPolicy()
	pol.TenantHeader = "X-Tenant"
	e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(4, 0, 0)}, policy: pol})
	if err := e.reg.SetTenants("catalog", &bulkhead.Settings{MaxConcurrent: 2}, 10); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ext := map[string]string{"bulkhead": "catalog"}
	check := func(tenant string) (string, denial, bool) {
		t.Helper()
		resp, err := e.client.Check(ctx, checkReq(ext, map[string]string{"x-tenant": tenant}))
		if err != nil {
			t.Fatal(err)
		}
		if tok, _, err := parseAdmitted(resp); err == nil {
			return tok, denial{}, true
		}
		d, err := parseDenial(resp)
		if err != nil {
			t.Fatal(err)
		}
		return "", d, false
	}
	var noisy []string
	for range 2 {
		tok, _, ok := check("noisy")
		if !ok {
			t.Fatal("noisy tenant refused within its compartment")
		}
		noisy = append(noisy, tok)
	}
	if _, d, ok := check("noisy"); ok || d.headers[HeaderReason] != "queue_full" {
		t.Fatalf("noisy tenant past its compartment: admitted=%v %v", ok, d.headers)
	}
	quiet, _, ok := check("quiet")
	if !ok {
		t.Fatal("quiet tenant refused while the bulkhead has room")
	}
	untenanted, _, ok := check("")
	if !ok {
		t.Fatal("request without a tenant refused while the bulkhead has room")
	}
	if s := snap(t, e.reg, "catalog"); s.InUse != 4 {
		t.Fatalf("bulkhead in use %d, want 4", s.InUse)
	}
	for _, tok := range append(noisy, quiet, untenanted) {
		if _, r := e.ledger.Release(tok, permit.AccessLog); r != permit.Released {
			t.Fatalf("release %s: %v", tok, r)
		}
	}
	if s := snap(t, e.reg, "catalog"); s.InUse != 0 {
		t.Fatalf("bulkhead in use %d after releases", s.InUse)
	}
	if tok, _, ok := check("noisy"); !ok {
		t.Fatal("noisy tenant's compartment not freed")
	} else {
		e.ledger.Release(tok, permit.AccessLog)
	}
	st := e.reg.Tenants("catalog").Stats()
	if st.Live != 2 || st.Rejected[bulkhead.ReasonQueueFull] != 1 {
		t.Fatalf("tenant stats %+v", st)
	}
}

// A tenant value over MaxTenantLen is counted and treated as no tenant: the
// request takes only the bulkhead's permit, and no sub-bulkhead is created
// for it. A value at the bound is a tenant.
func TestCheckTenantOversized(t *testing.T) {
	pol := DefaultPolicy()
	pol.TenantHeader = "x-tenant"
	e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(4, 0, 0)}, policy: pol})
	if err := e.reg.SetTenants("catalog", &bulkhead.Settings{MaxConcurrent: 1}, 10); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ext := map[string]string{"bulkhead": "catalog"}
	var tokens []string
	for _, id := range []string{strings.Repeat("t", MaxTenantLen+1), strings.Repeat("t", 64<<10), strings.Repeat("u", MaxTenantLen+1)} {
		resp, err := e.client.Check(ctx, checkReq(ext, map[string]string{"x-tenant": id}))
		tokens = append(tokens, wantAdmitted(t, resp, err, "catalog")) // a tenant limit of 1 would refuse the second
	}
	if st := e.reg.Tenants("catalog").Stats(); st.Live != 0 {
		t.Errorf("%d tenants live after oversized values, want 0", st.Live)
	}
	if got := e.rec.count(e.rec.inputs, string(bulkhead.InputTenant)); got != 3 {
		t.Errorf("InvalidInput(tenant) = %d, want 3", got)
	}
	resp, err := e.client.Check(ctx, checkReq(ext, map[string]string{"x-tenant": strings.Repeat("t", MaxTenantLen)}))
	tokens = append(tokens, wantAdmitted(t, resp, err, "catalog"))
	if st := e.reg.Tenants("catalog").Stats(); st.Live != 1 {
		t.Errorf("%d tenants live after a value at the bound, want 1", st.Live)
	}
	for _, tok := range tokens {
		if _, r := e.ledger.Release(tok, permit.AccessLog); r != permit.Released {
			t.Fatalf("release: %v", r)
		}
	}
}
