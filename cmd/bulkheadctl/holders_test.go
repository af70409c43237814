package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/admin/admintest"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

type nopPermit struct{}

func (nopPermit) Release() bool { return true }

// grant registers a permit of name held by node in e's ledger.
func (e *env) grant(t *testing.T, name, node string, p bulkhead.Priority, ttl time.Duration) string {
	t.Helper()
	tok, err := e.ledger.Grant(nopPermit{}, permit.Grant{Bulkhead: name, Node: node, Priority: p, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestHolders(t *testing.T) {
	e := newEnv(t)
	check(t, "holders of none", e.ctl(t, "holders", "catalog"), 0, "catalog holds no permits\n", "")

	first := e.grant(t, "catalog", "envoy-a", bulkhead.Critical, 3*time.Second)
	e.clk.Advance(time.Second)
	second := e.grant(t, "catalog", "", bulkhead.BestEffort, 3*time.Second)
	e.clk.Advance(time.Second)
	const adopted = "AAAAAAAAAAAAAAAAAAAAAA"
	if _, err := e.ledger.Adopt(nopPermit{}, adopted, permit.Grant{Bulkhead: "catalog", Node: "envoy-b", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, res := e.ledger.Renew(first, 3*time.Second); res != permit.Renewed {
		t.Fatalf("renew: %v", res)
	}
	e.clk.Advance(2500 * time.Millisecond) // second's lease is overdue: no sweep runs
	e.grant(t, "auth", "envoy-c", bulkhead.Normal, time.Minute)

	check(t, "holders", e.ctl(t, "holders", "catalog"), 0, `NODE     PRIORITY     SOURCE   AGE   RENEWED   EXPIRES IN
envoy-a  critical     granted  4.5s  2.5s ago  0.5s
-        best_effort  granted  3.5s  never     overdue
envoy-b  unknown      adopted  2.5s  2.5s ago  58s
`, "")
	check(t, "holders --limit", e.ctl(t, "holders", "catalog", "--limit", "1"), 0, `NODE     PRIORITY  SOURCE   AGE   RENEWED   EXPIRES IN
envoy-a  critical  granted  4.5s  2.5s ago  0.5s
the 1 oldest of 3 permits (--limit)
`, "")

	r := e.ctl(t, "holders", "catalog", "-o", "json")
	var v admin.HoldersView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 {
		t.Fatalf("holders -o json: %v, %+v", err, r)
	}
	if v.Bulkhead != "catalog" || v.Total != 3 || len(v.Holders) != 3 || v.Holders[2].Source != "adopted" ||
		v.Holders[1].Renewed != nil || v.Holders[0].Age != "4.5s" || !v.Time.Equal(t0.Add(4500*time.Millisecond)) {
		t.Errorf("holders -o json: %+v", v)
	}
	r = e.ctl(t, "holders", "auth", "-o", "yaml")
	for _, want := range []string{"bulkhead: auth\n", "total: 1\n", "  - node: envoy-c\n    priority: normal\n    source: granted\n", "    renewed: null\n"} {
		if !strings.Contains(r.stdout, want) || r.code != 0 {
			t.Errorf("holders -o yaml lacks %q (exit %d):\n%s", want, r.code, r.stdout)
		}
	}
	for _, out := range []string{"table", "json", "yaml"} {
		r := e.ctl(t, "holders", "catalog", "-o", out)
		for _, tok := range []string{first, second, adopted} {
			if strings.Contains(r.stdout, tok) {
				t.Errorf("holders -o %s shows a token:\n%s", out, r.stdout)
			}
		}
	}
}

func TestHoldersRefusals(t *testing.T) {
	e := newEnv(t)
	const more = "Run 'bulkheadctl help' for usage.\n"
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"unknown bulkhead", []string{"holders", "nope"}, 1,
			"bulkheadctl: no such bulkhead: \"nope\" (bulkheadctl status lists the bulkheads)\n"},
		{"no name", []string{"holders"}, 2, "bulkheadctl: holders: missing the bulkhead NAME (bulkheadctl holders NAME)\n" + more},
		{"limit zero", []string{"holders", "catalog", "--limit", "0"}, 2, "bulkheadctl: --limit 0: must be within [1, 1000]\n" + more},
		{"limit too large", []string{"holders", "catalog", "--limit", "1001"}, 2, "bulkheadctl: --limit 1001: must be within [1, 1000]\n" + more},
		{"bad output", []string{"holders", "catalog", "-o", "xml"}, 2, "bulkheadctl: holders: -o \"xml\": want table, json or yaml\n" + more},
	}
	for _, tc := range tests {
		check(t, tc.name, e.ctl(t, tc.args...), tc.code, "", tc.stderr)
	}
}

func TestHoldersServerWithoutLeases(t *testing.T) {
	auth, err := admin.NewAuthenticator()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	addr := admintest.Start(t, admin.New(e.fake, auth, admintest.Logger()))
	r := start(t.Context(), nil, false, "--addr", addr, "holders", "catalog").wait(t)
	check(t, "holders", r, 1, "", "bulkheadctl: the admin API at "+addr+" cannot list holders: this server does not list the holders of permits\n")
}
