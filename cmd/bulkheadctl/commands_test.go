package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

func TestStatus(t *testing.T) {
	e := newEnv(t)
	inv := start(context.Background(), nil, false, "status", "--addr", e.addr)
	e.advanceWhenWaiting(t, time.Second, func() {
		e.fake.Mutate("catalog", func(st *admin.Status) {
			st.Snapshot.Admitted[bulkhead.Critical] += 4
			st.Snapshot.Admitted[bulkhead.Normal] += 6
			st.Snapshot.Rejected[bulkhead.ReasonQueueFull] += 2
			st.Snapshot.Rejected[bulkhead.ReasonShed]++
			st.Outcomes.Failure += 3
		})
	})
	check(t, "status", inv.wait(t), 0, `BULKHEAD  KIND      LIMIT  ACTIVE  QUEUED  ADMITTED/S  REJECTED/S  FAILURES/S  SOURCE
auth      requests  1      0       0       0.0         0.0         -           file
catalog   requests  10     3       2       10.0        3.0         3.0         file
`, "")
}

func TestStatusOneReading(t *testing.T) {
	e := newEnv(t)
	e.ctl(t, "set", "auth", "--max-concurrent", "2")
	check(t, "status --sample 0", e.ctl(t, "status", "--sample", "0"), 0, `BULKHEAD  KIND      LIMIT  ACTIVE  QUEUED  ADMITTED/S  REJECTED/S  FAILURES/S  SOURCE
auth      requests  2      0       0       -           -           -           override
catalog   requests  10     3       2       -           -           -           file
`, "")
}

// The one-reading status names the shared ledger above the table, and
// whether it admits from capacity leases or per request.
func TestStatusLedger(t *testing.T) {
	const table = `BULKHEAD  KIND      LIMIT  ACTIVE  QUEUED  ADMITTED/S  REJECTED/S  FAILURES/S  SOURCE
auth      requests  1      0       0       -           -           -           file
catalog   requests  10     3       2       -           -           -           file
`
	for _, tc := range []struct {
		name   string
		ledger admin.LedgerInfo
		want   string
	}{
		{"memory", admin.LedgerInfo{Backend: "memory", State: "strict", Replicas: 1}, ""},
		{"redis with capacity leases", admin.LedgerInfo{Backend: "redis", State: "strict", Replicas: 3, OnUnavailable: "fail_closed", CapacityLeases: true},
			"ledger: redis, capacity leases, strict at this replica, 3 replicas, on_unavailable fail_closed\n"},
		{"redis per request", admin.LedgerInfo{Backend: "redis", State: "unavailable", Replicas: 2, OnUnavailable: "fail_open"},
			"ledger: redis, per request, unavailable at this replica, 2 replicas, on_unavailable fail_open\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvWith(t, []admin.Option{admin.WithLedger(func() admin.LedgerInfo { return tc.ledger })})
			check(t, "status --sample 0", e.ctl(t, "status", "--sample", "0"), 0, tc.want+table, "")
		})
	}
}

func TestGet(t *testing.T) {
	e := newEnv(t)
	check(t, "get", e.ctl(t, "get", "catalog"), 0, `NAME            catalog
KIND            requests
SOURCE          config file
MAX CONCURRENT  10
MAX QUEUE       20
MAX WAIT        500ms
RESERVE         critical 0.2, normal 0.1
LEASE TTL       1m0s
IN USE          3
QUEUED          critical 0, normal 2, best_effort 0
ADMITTED        critical 0, normal 5, best_effort 0
REJECTED        queue_full 0, shed 0, timeout 0, unknown_bulkhead 0, circuit_open 0
CANCELLED       0
RELEASED        2 (duplicate releases 0)
OUTCOMES        success 1, failure 1, aborted 0
TENANTS         2
`, "")

	r := e.ctl(t, "set", "catalog", "--max-concurrent", "4")
	if r.code != 0 {
		t.Fatalf("set: %+v", r)
	}
	r = e.ctl(t, "get", "catalog", "-o", "table")
	for _, want := range []string{"SOURCE          override by local from 127.0.0.1:", " at 2026-03-01T12:00:00Z\n", "MAX CONCURRENT  4  (file: 10)\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("get after set lacks %q:\n%s", want, r.stdout)
		}
	}

	r = e.ctl(t, "get", "catalog", "-o", "json")
	var v admin.View
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 {
		t.Fatalf("get -o json: %v, %+v", err, r)
	}
	if v.Name != "catalog" || v.Settings.MaxConcurrent != 4 || v.FileSettings.MaxConcurrent != 10 || v.Override == nil ||
		v.Settings.MaxWait != "500ms" || v.Outcomes == nil || v.Outcomes.Failure != 1 {
		t.Errorf("get -o json: %+v", v)
	}

	r = e.ctl(t, "get", "auth", "-o", "yaml")
	for _, want := range []string{"name: auth\n", "settings:\n  max_concurrent: 1\n  max_queue: 5\n  max_wait: 0s\n", "override: null\n", "lease_ttl: 1m0s\n"} {
		if !strings.Contains(r.stdout, want) || r.code != 0 {
			t.Errorf("get -o yaml lacks %q (exit %d):\n%s", want, r.code, r.stdout)
		}
	}
}

func TestSetAndReset(t *testing.T) {
	e := newEnv(t)
	check(t, "set", e.ctl(t, "set", "catalog", "--max-concurrent", "4", "--max-wait", "1s"), 0,
		`catalog: max_concurrent 10 -> 4
catalog: max_wait 500ms -> 1s
catalog: run-time override in force until the file's entry changes, bulkheadctl reset catalog, or a restart
`, "")
	check(t, "set again", e.ctl(t, "set", "catalog", "--max-concurrent", "4"), 0,
		`catalog: no change (the values given were already in force)
catalog: run-time override in force until the file's entry changes, bulkheadctl reset catalog, or a restart
`, "")
	check(t, "set reserves", e.ctl(t, "set", "catalog", "--reserve-critical", "0", "--reserve-normal=0.25", "--max-queue", "0"), 0,
		`catalog: max_queue 20 -> 0
catalog: reserve_critical 0.2 -> 0
catalog: reserve_normal 0.1 -> 0.25
catalog: run-time override in force until the file's entry changes, bulkheadctl reset catalog, or a restart
`, "")
	check(t, "reset", e.ctl(t, "reset", "catalog"), 0,
		`catalog: max_concurrent 4 -> 10
catalog: max_queue 0 -> 20
catalog: max_wait 1s -> 500ms
catalog: reserve_critical 0 -> 0.2
catalog: reserve_normal 0.25 -> 0.1
catalog: override dropped; the config file's settings are in force
`, "")
	check(t, "reset again", e.ctl(t, "reset", "catalog"), 0,
		"catalog: no override; the config file's settings were already in force\n", "")
	calls := e.fake.Calls()
	if len(calls) != 5 || !strings.HasPrefix(calls[0], "update catalog by local from 127.0.0.1:") {
		t.Errorf("calls: %q", calls)
	}
}

func TestRefusals(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"invalid limit", []string{"set", "catalog", "--max-concurrent", "0"}, 1,
			"bulkheadctl: refused: max_concurrent: must be at least 1, got 0 (check --max-concurrent)\n"},
		{"invalid reserves", []string{"set", "auth", "--reserve-critical", "0.5"}, 1,
			"bulkheadctl: refused: reserve: critical 0.5 + normal 0 leave best_effort no permit of max_concurrent 1 (check --reserve-critical/--reserve-normal)\n"},
		{"negative wait", []string{"set", "catalog", "--max-wait", "-1s"}, 1,
			"bulkheadctl: refused: max_wait: must not be negative, got -1s (check --max-wait)\n"},
		{"set unknown", []string{"set", "nope", "--max-queue", "1"}, 1,
			"bulkheadctl: no such bulkhead: \"nope\" (bulkheadctl status lists the bulkheads)\n"},
		{"get unknown", []string{"get", "nope"}, 1,
			"bulkheadctl: no such bulkhead: \"nope\" (bulkheadctl status lists the bulkheads)\n"},
		{"reset unknown", []string{"reset", "nope"}, 1,
			"bulkheadctl: no such bulkhead: \"nope\" (bulkheadctl status lists the bulkheads)\n"},
	}
	for _, tc := range tests {
		check(t, tc.name, e.ctl(t, tc.args...), tc.code, "", tc.stderr)
	}
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("refused commands changed something: %q", calls)
	}
}

func TestUsageErrors(t *testing.T) {
	e := newEnv(t)
	const more = "Run 'bulkheadctl help' for usage.\n"
	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"no command", nil, "bulkheadctl: no command given\n" + more},
		{"unknown command", []string{"frob"}, "bulkheadctl: unknown command \"frob\" (commands: status, get, holders, set, reset, circuit, suggest, watch)\n" + more},
		{"unknown flag", []string{"status", "--frob"}, "bulkheadctl: status: unknown flag: --frob\n" + more},
		{"unknown global flag", []string{"--frob", "status"}, "bulkheadctl: unknown flag: --frob\n" + more},
		{"set nothing", []string{"set", "catalog"}, "bulkheadctl: set: nothing to change; give at least one of --max-concurrent, --max-queue, --max-wait, --reserve-critical, --reserve-normal\n" + more},
		{"set no name", []string{"set", "--max-queue", "1"}, "bulkheadctl: set: missing the bulkhead NAME (bulkheadctl set NAME)\n" + more},
		{"set two names", []string{"set", "a", "b", "--max-queue", "1"}, "bulkheadctl: set: want one bulkhead NAME, got 2 arguments: a b\n" + more},
		{"set bad duration", []string{"set", "catalog", "--max-wait", "soon"}, "*"},
		{"set bad number", []string{"set", "catalog", "--max-concurrent", "many"}, "*"},
		{"get bad output", []string{"get", "catalog", "-o", "xml"}, "bulkheadctl: get: -o \"xml\": want table, json or yaml\n" + more},
		{"status argument", []string{"status", "catalog"}, "bulkheadctl: status: takes no arguments, got: catalog\n" + more},
		{"watch fast", []string{"watch", "--interval", "1ms"}, "bulkheadctl: --interval 1ms: must be within [100ms, 1m0s]\n" + more},
		{"status sample", []string{"status", "--sample", "2m"}, "bulkheadctl: --sample 2m0s: must be within [100ms, 1m0s]\n" + more},
		{"help unknown", []string{"help", "frob"}, "bulkheadctl: help: unknown command \"frob\" (commands: status, get, holders, set, reset, circuit, suggest, watch)\n" + more},
	}
	for _, tc := range tests {
		r := e.ctl(t, tc.args...)
		if tc.name == "no command" {
			r = start(context.Background(), nil, false).wait(t)
		}
		check(t, tc.name, r, 2, "*", tc.stderr)
		if !strings.HasSuffix(r.stderr, more) {
			t.Errorf("%s: stderr does not point to help: %q", tc.name, r.stderr)
		}
	}
}
