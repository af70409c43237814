package control

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// TestCircuits: a reload gives the bulkheads that configure a breaker one
// (keeping its state across reloads), statuses show it, SetCircuit
// overrides it, and a bulkhead that drops circuit_breaker loses it.
func TestCircuits(t *testing.T) {
	set := breaker.NewSet(clock.NewFake(time.Unix(1000, 0)))
	var logs bytes.Buffer
	c := New(bulkhead.NewRegistry(), &policyRecorder{}, slog.New(slog.NewTextHandler(&logs, nil)), WithBreakers(set))
	withBreaker := `
bulkheads:
  catalog: {max_concurrent: 10, circuit_breaker: {min_requests: 1}}
  auth:    {max_concurrent: 50}
`
	if _, err := c.Reload(parse(t, withBreaker)); err != nil {
		t.Fatal(err)
	}
	set.Record("catalog", true, 0)
	if _, err := c.Reload(parse(t, withBreaker+"  orders: {max_concurrent: 1}\n")); err != nil {
		t.Fatal(err)
	}
	st, err := c.Get("catalog")
	if err != nil || st.Circuit == nil || st.Circuit.State != breaker.Open {
		t.Fatalf("catalog: %+v %v; want its breaker open across the reload", st.Circuit, err)
	}
	if st, _ := c.Get("auth"); st.Circuit != nil {
		t.Fatal("auth shows a breaker it does not configure")
	}
	if st, err = c.SetCircuit("catalog", breaker.ForceClosed, "alice"); err != nil || st.Circuit.Mode != breaker.ForceClosed {
		t.Fatalf("SetCircuit: %+v %v", st.Circuit, err)
	}
	if !strings.Contains(logs.String(), "actor=alice") {
		t.Errorf("the mode change was not logged with its actor:\n%s", logs.String())
	}
	if _, err := c.SetCircuit("auth", breaker.ForceOpen, "alice"); !errors.Is(err, ErrNoBreaker) {
		t.Errorf("SetCircuit(auth) = %v, want ErrNoBreaker", err)
	}
	if _, err := c.SetCircuit("nope", breaker.ForceOpen, "alice"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetCircuit(nope) = %v, want ErrNotFound", err)
	}
	if _, err := c.Reload(parse(t, "bulkheads: {catalog: {max_concurrent: 10}}\n")); err != nil {
		t.Fatal(err)
	}
	if set.Get("catalog") != nil {
		t.Error("catalog kept its breaker after circuit_breaker was removed")
	}
}
