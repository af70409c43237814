package main

import (
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
)

func TestCircuit(t *testing.T) {
	e := newEnv(t)
	e.fake.Mutate("catalog", func(st *admin.Status) {
		st.Circuit = &breaker.Snapshot{Since: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Calls: 9, Failed: 2}
	})
	check(t, "circuit force_open", e.ctl(t, "circuit", "catalog", "force_open"), 0, "catalog: circuit open, mode force_open\n", "")
	check(t, "circuit auto", e.ctl(t, "circuit", "catalog", "auto"), 0, "catalog: circuit closed, mode auto\n", "")
	if r := e.ctl(t, "circuit", "auth", "force_open"); r.code == 0 || !strings.Contains(r.stderr, "no circuit breaker") {
		t.Errorf("a bulkhead without a breaker: %+v", r)
	}
	if r := e.ctl(t, "circuit", "catalog", "open"); r.code == 0 || !strings.Contains(r.stderr, "mode") {
		t.Errorf("an unknown mode: %+v", r)
	}
	if r := e.ctl(t, "circuit", "catalog"); r.code != exitUsage {
		t.Errorf("missing mode: %+v", r)
	}
	if got := e.ctl(t, "get", "catalog").stdout; !strings.Contains(got,
		"CIRCUIT         closed (mode auto) since 2026-01-01T00:00:00.000Z; window 9 calls, 2 failed; refused 0; opened 0 times") {
		t.Errorf("get shows no circuit line:\n%s", got)
	}
}
