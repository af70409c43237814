package admin_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/admin/admintest"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

type nopPermit struct{}

func (nopPermit) Release() bool { return true }

// adoptedToken is a token Grant could have issued (16 zero bytes).
const adoptedToken = "AAAAAAAAAAAAAAAAAAAAAA"

// holdersFixture is an admin server over a fake controller and a real
// ledger on a fake clock. catalog holds, oldest first: a critical permit
// of envoy-a granted at t0 and renewed at t0+2s; a best_effort permit of
// an unknown node granted at t0+1s; a permit of envoy-b adopted (and so
// renewed) at t0+2s.
// auth holds one permit. The clock reads t0+2.5s.
type holdersFixture struct {
	*fixture
	clk    *clock.Fake
	ledger *permit.Memory
	tokens []string
}

func newHoldersFixture(t *testing.T, auth *admin.Authenticator) *holdersFixture {
	t.Helper()
	clk := clock.NewFake(t0)
	h := &holdersFixture{clk: clk, ledger: permit.NewMemory(clk)}
	h.fixture = newFixture(t, auth, admin.WithClock(clk), admin.WithLeases(h.ledger))
	grant := func(name, node string, p bulkhead.Priority) string {
		t.Helper()
		tok, err := h.ledger.Grant(nopPermit{}, permit.Grant{Bulkhead: name, Node: node, Priority: p, TTL: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		h.tokens = append(h.tokens, tok)
		return tok
	}
	first := grant("catalog", "envoy-a", bulkhead.Critical)
	grant("auth", "envoy-a", bulkhead.Normal)
	clk.Advance(time.Second)
	grant("catalog", "", bulkhead.BestEffort)
	clk.Advance(time.Second)
	if _, err := h.ledger.Adopt(nopPermit{}, adoptedToken, permit.Grant{Bulkhead: "catalog", Node: "envoy-b", TTL: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	h.tokens = append(h.tokens, adoptedToken)
	if _, res := h.ledger.Renew(first, 3*time.Second); res != permit.Renewed {
		t.Fatalf("renew: %v", res)
	}
	clk.Advance(500 * time.Millisecond)
	return h
}

// noTokens fails when out shows any of the fixture's tokens.
func (h *holdersFixture) noTokens(t *testing.T, out string) {
	t.Helper()
	for _, tok := range h.tokens {
		if strings.Contains(out, tok) {
			t.Errorf("a token is shown: %s", out)
		}
	}
}

func TestListHoldersGRPC(t *testing.T) {
	h := newHoldersFixture(t, nil)
	c := dial(t, admintest.Start(t, h.srv))
	ctx := testCtx(t)

	resp, err := c.ListHolders(ctx, &adminv1.ListHoldersRequest{Name: "catalog"})
	if err != nil {
		t.Fatalf("list holders: %v", err)
	}
	if resp.GetTotal() != 3 || len(resp.GetHolders()) != 3 || !resp.GetTime().AsTime().Equal(t0.Add(2500*time.Millisecond)) {
		t.Fatalf("list holders: %v", resp)
	}
	type row struct {
		node     string
		prio     adminv1.Priority
		src      adminv1.Holder_Source
		acquired time.Duration
		renewed  time.Duration // -1: never
		expires  time.Duration
		age      time.Duration
	}
	want := []row{
		{"envoy-a", adminv1.Priority_PRIORITY_CRITICAL, adminv1.Holder_SOURCE_GRANTED, 0, 2 * time.Second, 5 * time.Second, 2500 * time.Millisecond},
		{"", adminv1.Priority_PRIORITY_BEST_EFFORT, adminv1.Holder_SOURCE_GRANTED, time.Second, -1, 4 * time.Second, 1500 * time.Millisecond},
		// Adopted from a periodic entry, which renews it too.
		{"envoy-b", adminv1.Priority_PRIORITY_UNSPECIFIED, adminv1.Holder_SOURCE_ADOPTED, 2 * time.Second, 2 * time.Second, 5 * time.Second, 500 * time.Millisecond},
	}
	for i, hd := range resp.GetHolders() {
		renewed := time.Duration(-1)
		if hd.GetRenewed() != nil {
			renewed = hd.GetRenewed().AsTime().Sub(t0)
		}
		got := row{hd.GetNode(), hd.GetPriority(), hd.GetSource(), hd.GetAcquired().AsTime().Sub(t0), renewed,
			hd.GetExpires().AsTime().Sub(t0), hd.GetAge().AsDuration()}
		if got != want[i] {
			t.Errorf("holder %d: %+v, want %+v", i, got, want[i])
		}
	}
	raw, err := protojson.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	h.noTokens(t, string(raw))

	two, err := c.ListHolders(ctx, &adminv1.ListHoldersRequest{Name: "catalog", Limit: 2})
	if err != nil || two.GetTotal() != 3 || len(two.GetHolders()) != 2 || two.GetHolders()[1].GetNode() != "" {
		t.Fatalf("limit 2: %v, %v", two, err)
	}
	none, err := c.ListHolders(ctx, &adminv1.ListHoldersRequest{Name: "auth", Limit: 1})
	if err != nil || none.GetTotal() != 1 || len(none.GetHolders()) != 1 {
		t.Fatalf("auth: %v, %v", none, err)
	}
}

func TestListHoldersBound(t *testing.T) {
	clk := clock.NewFake(t0)
	ledger := permit.NewMemory(clk)
	for range 1005 {
		if _, err := ledger.Grant(nopPermit{}, permit.Grant{Bulkhead: "catalog", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Millisecond)
	}
	f := newFixture(t, nil, admin.WithClock(clk), admin.WithLeases(ledger))
	c := dial(t, admintest.Start(t, f.srv))
	for _, tc := range []struct {
		limit int32
		want  int
	}{{0, 100}, {1, 1}, {1000, 1000}} {
		resp, err := c.ListHolders(testCtx(t), &adminv1.ListHoldersRequest{Name: "catalog", Limit: tc.limit})
		if err != nil || resp.GetTotal() != 1005 || len(resp.GetHolders()) != tc.want {
			t.Fatalf("limit %d: total %d, %d holders, %v; want 1005, %d", tc.limit, resp.GetTotal(), len(resp.GetHolders()), err, tc.want)
		}
		if age := resp.GetHolders()[0].GetAge().AsDuration(); age != 1005*time.Millisecond {
			t.Errorf("limit %d: the first holder is %v old, want the oldest (1.005s)", tc.limit, age)
		}
	}
}

func TestListHoldersErrors(t *testing.T) {
	h := newHoldersFixture(t, nil)
	c := dial(t, admintest.Start(t, h.srv))
	plain := newFixture(t, nil) // no WithLeases
	cPlain := dial(t, admintest.Start(t, plain.srv))
	tests := []struct {
		name  string
		c     adminv1.AdminServiceClient
		req   *adminv1.ListHoldersRequest
		code  codes.Code
		field string
	}{
		{"unknown bulkhead", c, &adminv1.ListHoldersRequest{Name: "nope"}, codes.NotFound, ""},
		{"no name", c, &adminv1.ListHoldersRequest{}, codes.InvalidArgument, "name"},
		{"negative limit", c, &adminv1.ListHoldersRequest{Name: "catalog", Limit: -1}, codes.InvalidArgument, "limit"},
		{"limit above the bound", c, &adminv1.ListHoldersRequest{Name: "catalog", Limit: 1001}, codes.InvalidArgument, "limit"},
		{"server without leases", cPlain, &adminv1.ListHoldersRequest{Name: "catalog"}, codes.Unimplemented, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c.ListHolders(testCtx(t), tc.req)
			if status.Code(err) != tc.code || field(err) != tc.field {
				t.Fatalf("%v (field %q), want %v (field %q)", err, field(err), tc.code, tc.field)
			}
		})
	}
	if msg := status.Convert(mustErr(c.ListHolders(testCtx(t), &adminv1.ListHoldersRequest{Name: "nope"}))).Message(); msg != `no such bulkhead: "nope"` {
		t.Errorf("unknown bulkhead: message %q", msg)
	}
}

func mustErr(_ any, err error) error { return err }

func TestListHoldersJSON(t *testing.T) {
	h := newHoldersFixture(t, nil)
	ts := httptest.NewServer(h.srv.Handler())
	defer ts.Close()
	tests := []struct {
		name, method, path string
		code               int
		want               map[string]any
	}{
		{"all", "GET", "/v1/bulkheads/catalog/holders", 200, map[string]any{"bulkhead": "catalog", "total": 3.0, "holders": 3.0}},
		{"limit", "GET", "/v1/bulkheads/catalog/holders?limit=1", 200, map[string]any{"total": 3.0, "holders": 1.0}},
		{"limit zero", "GET", "/v1/bulkheads/catalog/holders?limit=0", 200, map[string]any{"holders": 3.0}},
		{"other bulkhead", "GET", "/v1/bulkheads/auth/holders", 200, map[string]any{"bulkhead": "auth", "total": 1.0}},
		{"unknown bulkhead", "GET", "/v1/bulkheads/nope/holders", 404, map[string]any{"error": `no such bulkhead: "nope"`}},
		{"limit not a number", "GET", "/v1/bulkheads/catalog/holders?limit=many", 400,
			map[string]any{"field": "limit", "error": `limit: not an integer: "many"`}},
		{"limit above the bound", "GET", "/v1/bulkheads/catalog/holders?limit=1001", 400,
			map[string]any{"field": "limit", "error": "limit: must be within [0, 1000] (0: 100), got 1001"}},
		{"limit beyond int32", "GET", "/v1/bulkheads/catalog/holders?limit=4294967297", 400, map[string]any{"field": "limit"}},
		{"negative limit", "GET", "/v1/bulkheads/catalog/holders?limit=-5", 400, map[string]any{"field": "limit"}},
		{"wrong method", "DELETE", "/v1/bulkheads/catalog/holders", 405, nil},
	}
	for _, tc := range tests {
		r := do(t, ts.Client(), tc.method, ts.URL+tc.path, "", nil)
		if r.code != tc.code {
			t.Errorf("%s: status %d, want %d: %s", tc.name, r.code, tc.code, r.raw)
			continue
		}
		r.check(t, tc.name, tc.want)
		h.noTokens(t, r.raw)
	}

	r := do(t, ts.Client(), "GET", ts.URL+"/v1/bulkheads/catalog/holders", "", nil)
	var v admin.HoldersView
	if err := json.Unmarshal([]byte(r.raw), &v); err != nil {
		t.Fatal(err)
	}
	renewed := t0.Add(2 * time.Second)
	want := []admin.HolderView{
		{Node: "envoy-a", Priority: "critical", Source: "granted", Acquired: t0, Renewed: &renewed, Expires: t0.Add(5 * time.Second), Age: "2.5s"},
		{Node: "", Priority: "best_effort", Source: "granted", Acquired: t0.Add(time.Second), Expires: t0.Add(4 * time.Second), Age: "1.5s"},
		{Node: "envoy-b", Priority: "unknown", Source: "adopted", Acquired: t0.Add(2 * time.Second), Renewed: &renewed, Expires: t0.Add(5 * time.Second), Age: "500ms"},
	}
	if len(v.Holders) != len(want) || !v.Time.Equal(t0.Add(2500*time.Millisecond)) {
		t.Fatalf("holders: %+v", v)
	}
	for i, got := range v.Holders {
		w := want[i]
		if got.Node != w.Node || got.Priority != w.Priority || got.Source != w.Source || !got.Acquired.Equal(w.Acquired) ||
			!got.Expires.Equal(w.Expires) || got.Age != w.Age || (got.Renewed == nil) != (w.Renewed == nil) ||
			(got.Renewed != nil && !got.Renewed.Equal(*w.Renewed)) {
			t.Errorf("holder %d: %+v, want %+v", i, got, w)
		}
	}
	if !strings.Contains(r.raw, `"renewed":null`) {
		t.Errorf("a lease never renewed should show renewed: null: %s", r.raw)
	}
}

// The holders are behind the same credentials as every other call.
func TestListHoldersNeedsCredentials(t *testing.T) {
	auth, err := admin.NewAuthenticator(admin.WithToken("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHoldersFixture(t, auth)
	addr := admintest.Start(t, h.srv)
	_, err = dial(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials())).
		ListHolders(testCtx(t), &adminv1.ListHoldersRequest{Name: "catalog"})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC without a token: %v, want Unauthenticated", err)
	}
	ts := httptest.NewServer(h.srv.Handler())
	defer ts.Close()
	if r := do(t, ts.Client(), "GET", ts.URL+"/v1/bulkheads/catalog/holders", "", nil); r.code != 401 {
		t.Errorf("JSON without a token: %d, want 401: %s", r.code, r.raw)
	}
	if r := do(t, ts.Client(), "GET", ts.URL+"/v1/bulkheads/catalog/holders", "", map[string]string{"Authorization": "Bearer s3cret"}); r.code != 200 {
		t.Errorf("JSON with the token: %d, want 200: %s", r.code, r.raw)
	}
}
