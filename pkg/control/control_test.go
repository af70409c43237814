package control

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
)

type policyRecorder struct {
	mu sync.Mutex
	p  []authz.Policy
}

func (r *policyRecorder) SetPolicy(p authz.Policy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.p = append(r.p, p)
}

func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

func newControl(t *testing.T) (*Control, *bulkhead.Registry, *bytes.Buffer, *policyRecorder) {
	reg := bulkhead.NewRegistry()
	var logs bytes.Buffer
	pr := &policyRecorder{}
	c := New(reg, pr, slog.New(slog.NewTextHandler(&logs, nil)))
	return c, reg, &logs, pr
}

func intp(n int) *int { return &n }

const base = `
bulkheads:
  catalog: {max_concurrent: 10, max_queue: 5, max_wait: 500ms, lease_ttl: 30s}
  auth:    {max_concurrent: 50}
`

func TestOverrideLifecycle(t *testing.T) {
	c, reg, logs, pr := newControl(t)
	if _, err := c.Reload(parse(t, base)); err != nil {
		t.Fatal(err)
	}
	if len(pr.p) != 1 || pr.p[0].LeaseTTL["catalog"] != 30*time.Second {
		t.Fatalf("policy not applied: %+v", pr.p)
	}

	st, err := c.Update("catalog", Patch{MaxConcurrent: intp(3)}, "token:abcd")
	if err != nil {
		t.Fatal(err)
	}
	if st.Snapshot.Settings.MaxConcurrent != 3 || st.FileSettings.MaxConcurrent != 10 || st.Override == nil || st.Override.Actor != "token:abcd" {
		t.Fatalf("after update: %+v", st)
	}
	for _, want := range []string{"bulkhead changed", "actor=token:abcd", "before=\"max_concurrent=10", "after=\"max_concurrent=3"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("change log lacks %q:\n%s", want, logs)
		}
	}

	// A reload that leaves catalog's entry alone keeps the override.
	if _, err := c.Reload(parse(t, base+"  orders: {max_concurrent: 7}\n")); err != nil {
		t.Fatal(err)
	}
	if got := reg.Get("catalog").Settings().MaxConcurrent; got != 3 {
		t.Fatalf("override lost on an unrelated reload: limit %d", got)
	}
	// A reload that changes catalog's entry wins over the override.
	changed := strings.Replace(base, "max_concurrent: 10", "max_concurrent: 12", 1)
	if _, err := c.Reload(parse(t, changed)); err != nil {
		t.Fatal(err)
	}
	st, _ = c.Get("catalog")
	if st.Snapshot.Settings.MaxConcurrent != 12 || st.Override != nil {
		t.Fatalf("file change did not win: %+v", st)
	}
	if !strings.Contains(logs.String(), "admin override dropped") {
		t.Error("dropped override not logged")
	}

	// Reset goes back to the file.
	if _, err := c.Update("catalog", Patch{MaxQueue: intp(0)}, "local"); err != nil {
		t.Fatal(err)
	}
	st, err = c.Reset("catalog", "local")
	if err != nil || st.Override != nil || st.Snapshot.Settings.MaxQueue != 5 {
		t.Fatalf("reset: %+v %v", st, err)
	}
	// An update that equals the file is no override.
	st, _ = c.Update("catalog", Patch{MaxConcurrent: intp(12)}, "local")
	if st.Override != nil {
		t.Fatal("update equal to the file kept an override")
	}
}

func TestUpdateRefusals(t *testing.T) {
	c, reg, _, _ := newControl(t)
	if _, err := c.Reload(parse(t, base)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Update("nope", Patch{MaxConcurrent: intp(1)}, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown bulkhead: %v", err)
	}
	neg := -1
	_, err := c.Update("catalog", Patch{MaxConcurrent: intp(0), MaxQueue: &neg}, "x")
	if !errors.Is(err, bulkhead.ErrInvalidSettings) || !strings.Contains(err.Error(), "max_concurrent") || !strings.Contains(err.Error(), "max_queue") {
		t.Fatalf("invalid patch: %v", err)
	}
	if reg.Get("catalog").Settings().MaxConcurrent != 10 {
		t.Fatal("invalid patch changed the bulkhead")
	}
	if st, _ := c.Get("catalog"); st.Override != nil {
		t.Fatal("invalid patch recorded an override")
	}
}

// Removing a bulkhead stops admission but its permits are still released;
// changing one resizes it in place without dropping waiters.
func TestReloadKeepsPermitsAndWaiters(t *testing.T) {
	c, reg, _, _ := newControl(t)
	if _, err := c.Reload(parse(t, `
bulkheads:
  catalog: {max_concurrent: 1, max_queue: 4}
  auth: {max_concurrent: 1}
`)); err != nil {
		t.Fatal(err)
	}
	catalog, auth := reg.Get("catalog"), reg.Get("auth")
	held, _ := catalog.Acquire(context.Background(), bulkhead.Normal)
	authHeld, _ := auth.Acquire(context.Background(), bulkhead.Normal)
	got := make(chan error, 1)
	go func() {
		p, err := catalog.Acquire(context.Background(), bulkhead.Normal)
		if err == nil {
			p.Release()
		}
		got <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for catalog.Snapshot().QueuedTotal() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("waiter never queued")
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
	ch, err := c.Reload(parse(t, `
bulkheads:
  catalog: {max_concurrent: 2, max_queue: 4}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Resized) != 1 || len(ch.Removed) != 1 || reg.Get("catalog") != catalog {
		t.Fatalf("changes %+v", ch)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter after grow: %v", err)
	}
	if _, err := auth.TryAcquire(bulkhead.Critical); !errors.Is(err, bulkhead.ErrClosed) {
		t.Fatalf("removed bulkhead still admits: %v", err)
	}
	if !authHeld.Release() || !held.Release() {
		t.Fatal("permits of a removed or resized bulkhead were not released")
	}
}

func TestPolicy(t *testing.T) {
	cfg := parse(t, `
authz:
  priority_header: x-prio
  default_priority: best_effort
  unknown_bulkhead: default
  default_bulkhead: catalog
  deny_status: 429
  deadline_margin: 40ms
  retry_after: 3s
  tenant_header: x-tenant
  trusted_priority_sources: ["10.0.0.0/8"]
leases: {default_ttl: 45s, max_route_ttl: 2m}
bulkheads:
  catalog: {max_concurrent: 2, lease_ttl: 5s}
  auth: {max_concurrent: 2}
`)
	p := Policy(cfg)
	if p.PriorityHeader != "x-prio" || p.DefaultPriority.String() != "best_effort" || p.Unmatched != authz.UseDefault ||
		p.DefaultBulkhead != "catalog" || p.DenyStatus != 429 || p.DeadlineMargin != 40*time.Millisecond ||
		p.RetryAfter != 3*time.Second || p.DefaultLeaseTTL != 45*time.Second || p.TenantHeader != "x-tenant" ||
		p.MaxRouteLeaseTTL != 2*time.Minute {
		t.Fatalf("Policy = %+v", p)
	}
	if len(p.TrustedPrioritySources) != 1 || p.TrustedPrioritySources[0].String() != "10.0.0.0/8" {
		t.Fatalf("trusted priority sources = %v", p.TrustedPrioritySources)
	}
	if p.LeaseTTL["catalog"] != 5*time.Second || p.LeaseTTL["auth"] != 45*time.Second {
		t.Fatalf("lease TTLs = %v", p.LeaseTTL)
	}
	for yaml, want := range map[string]authz.UnmatchedPolicy{
		"authz: {unknown_bulkhead: deny}\n":  authz.Deny,
		"authz: {unknown_bulkhead: allow}\n": authz.Allow,
		"{}\n":                               authz.Deny,
	} {
		if got := Policy(parse(t, yaml)).Unmatched; got != want {
			t.Errorf("%q: Unmatched = %v, want %v", yaml, got, want)
		}
	}
}

func TestPolicyConnections(t *testing.T) {
	t.Parallel()
	p := Policy(parse(t, "bulkheads: {pg: {max_concurrent: 2, connections: {ports: [5432, 6432], priority: critical}}, c: {max_concurrent: 1}}\n"))
	want := authz.Connection{Bulkhead: "pg", Priority: bulkhead.Critical}
	if len(p.Connections) != 2 || p.Connections[5432] != want || p.Connections[6432] != want {
		t.Fatalf("Connections = %v", p.Connections)
	}
	if p := Policy(parse(t, "bulkheads: {c: {max_concurrent: 1}}\n")); p.Connections != nil {
		t.Fatalf("Connections without connection bulkheads = %v", p.Connections)
	}
}

func TestStatusKind(t *testing.T) {
	c, _, _, _ := newControl(t)
	if _, err := c.Reload(parse(t, "bulkheads: {pg: {max_concurrent: 2, connections: {ports: [5432]}}, c: {max_concurrent: 1}}\n")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]config.Kind{"pg": config.KindConnections, "c": config.KindRequests} {
		st, err := c.Get(name)
		if err != nil || st.Kind != want {
			t.Errorf("Get(%s) kind = %q, %v; want %q", name, st.Kind, err, want)
		}
	}
}
