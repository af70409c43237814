package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// httpCheck is a Check for bulkhead key with request headers, from source.
func httpCheck(key, source string, headers map[string]string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: source}}}},
		ContextExtensions: map[string]string{"bulkhead": key},
		Request:           &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Headers: headers}},
	}}
}

// admitAs sends req and returns the class its permit was granted at, after
// releasing it.
func admitAs(t *testing.T, ctx context.Context, rn *running, req *authv3.CheckRequest) bulkhead.Priority {
	t.Helper()
	resp, err := authv3.NewAuthorizationClient(rn.conn).Check(ctx, req)
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("Check = %v, %v", resp, err)
	}
	lease, _ := rn.r.Ledger.Release(resp.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue(), permit.AccessLog)
	return lease.Priority
}

// Spoofed and oversized inputs through the daemon's wiring: configuration
// to authz policy to metrics.
func TestHostileCheckInputs(t *testing.T) {
	rn := start(t, parseConfig(t, `
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
authz: {tenant_header: x-tenant, trusted_priority_sources: [10.0.0.0/8]}
bulkheads:
  catalog: {max_concurrent: 10, tenant: {max_concurrent: 2}}
`))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	crit := map[string]string{"x-bulkhead-priority": "critical"}
	if p := admitAs(t, ctx, rn, httpCheck("catalog", "10.1.2.3", crit)); p != bulkhead.Critical {
		t.Errorf("trusted source admitted as %v", p)
	}
	if p := admitAs(t, ctx, rn, httpCheck("catalog", "192.0.2.1", crit)); p != bulkhead.Normal {
		t.Errorf("untrusted raise admitted as %v, want normal", p)
	}
	if p := admitAs(t, ctx, rn, httpCheck("catalog", "192.0.2.1", map[string]string{"x-bulkhead-priority": "best_effort"})); p != bulkhead.BestEffort {
		t.Errorf("untrusted lowering admitted as %v, want best_effort", p)
	}
	for _, v := range []string{"urgent", "CRITICAL", strings.Repeat("critical", 8000), "critical\x00"} {
		if p := admitAs(t, ctx, rn, httpCheck("catalog", "10.1.2.3", map[string]string{"x-bulkhead-priority": v})); p != bulkhead.Normal {
			t.Errorf("invalid priority %.20q admitted as %v", v, p)
		}
	}
	admitAs(t, ctx, rn, httpCheck("catalog", "192.0.2.1", map[string]string{"x-tenant": strings.Repeat("t", 60000)}))
	nodeCtx := metadata.AppendToOutgoingContext(ctx, authz.NodeHeader, "not a node id")
	admitAs(t, nodeCtx, rn, httpCheck("catalog", "192.0.2.1", nil))

	for _, c := range []struct {
		name, label string
		want        float64
	}{
		{"bulkhead_untrusted_priority_total", "catalog", 1},
		{"bulkhead_invalid_priority_total", "catalog", 4},
		{"bulkhead_invalid_inputs_total", string(bulkhead.InputTenant), 1},
		{"bulkhead_invalid_inputs_total", string(bulkhead.InputNode), 1},
	} {
		if got := counter(t, rn, c.name, c.label); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.label, got, c.want)
		}
	}
	if st := rn.r.Registry.Tenants("catalog").Stats(); st.Live != 0 {
		t.Errorf("an oversized tenant value made %d tenants", st.Live)
	}
}

// A flood of distinct tenant values (each request ending, as real traffic
// does) keeps the live tenants at limits.max_tenants, a quiet tenant is
// admitted throughout, and the flood adds no metric series. A flood of
// unknown bulkhead keys adds none either.
func TestHostileTenantAndKeyFlood(t *testing.T) {
	const maxTenants, flood = 50, 3000
	rn := start(t, parseConfig(t, fmt.Sprintf(`
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
authz: {tenant_header: x-tenant}
limits: {max_tenants: %d}
bulkheads:
  catalog: {max_concurrent: 20, tenant: {max_concurrent: 2, max_queue: 0}}
`, maxTenants)))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ac := authv3.NewAuthorizationClient(rn.conn)
	quiet, _ := ac.Check(ctx, httpCheck("catalog", "", map[string]string{"x-tenant": "quiet"}))
	quietToken := quiet.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue()
	if quietToken == "" {
		t.Fatal("quiet tenant refused")
	}
	seriesBefore := seriesCount(t, rn)

	var wg sync.WaitGroup
	var mu sync.Mutex
	var refused, maxLive int
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < flood; i += 4 {
				req := httpCheck("catalog", "", map[string]string{"x-tenant": fmt.Sprintf("tenant-%d-%s", i, strings.Repeat("x", 100))})
				resp, err := ac.Check(ctx, req)
				tok := resp.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue()
				mu.Lock()
				if err != nil || tok == "" {
					refused++
				}
				maxLive = max(maxLive, rn.r.Registry.Tenants("catalog").Stats().Live)
				mu.Unlock()
				if tok != "" {
					rn.r.Ledger.Release(tok, permit.AccessLog)
				}
				if i%100 == 0 { // the quiet tenant, now and then: never refused
					resp, err := ac.Check(ctx, httpCheck("catalog", "", map[string]string{"x-tenant": "quiet"}))
					tok := resp.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue()
					if err != nil || tok == "" {
						t.Errorf("quiet tenant refused during the flood: %v, %v", resp, err)
						continue
					}
					rn.r.Ledger.Release(tok, permit.AccessLog)
				}
			}
		}()
	}
	wg.Wait()
	if refused != 0 {
		t.Errorf("%d of %d flood requests refused: idle tenants should make room", refused, flood)
	}
	st := rn.r.Registry.Tenants("catalog").Stats()
	if maxLive > maxTenants || st.Live > maxTenants || st.Evicted < flood-maxTenants {
		t.Errorf("tenants live %d (max seen %d), evicted %d; want at most %d live", st.Live, maxLive, st.Evicted, maxTenants)
	}
	for i := range 2000 {
		resp, err := ac.Check(ctx, httpCheck(fmt.Sprintf("key-%d", i), "", nil))
		if err != nil || resp.GetDeniedResponse() == nil {
			t.Fatalf("unknown key: %v, %v", resp, err)
		}
	}
	// At most the rejected{_unknown} series is new (it may exist already).
	if after := seriesCount(t, rn); after < seriesBefore || after > seriesBefore+1 {
		t.Errorf("metric series %d before the floods, %d after: labels grew with input", seriesBefore, after)
	}
	rn.r.Ledger.Release(quietToken, permit.AccessLog)
}

// seriesCount counts every series the daemon exports, less the Go runtime's
// and the process's (their count does not depend on input).
func seriesCount(t *testing.T, rn *running) int {
	t.Helper()
	mfs, err := rn.r.promReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		// The oldest permit's age is there only while a bulkhead holds one.
		if name := mf.GetName(); strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") ||
			name == "bulkhead_oldest_permit_age_seconds" {
			continue
		}
		n += len(mf.GetMetric())
	}
	return n
}

// leases.max_permits caps the permits held at once: a Check beyond it
// cannot decide (RESOURCE_EXHAUSTED, so Envoy's failure mode applies) and
// holds nothing.
func TestHostileMaxPermits(t *testing.T) {
	rn := start(t, parseConfig(t, `
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
leases: {max_permits: 3}
bulkheads:
  catalog: {max_concurrent: 100}
`))
	var tokens []string
	for range 3 {
		tokens = append(tokens, grant(t, rn, "catalog", ""))
	}
	_, err := authv3.NewAuthorizationClient(rn.conn).Check(context.Background(), checkReq("catalog"))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Check beyond max_permits = %v, want ResourceExhausted", err)
	}
	if inUse(rn, "catalog") != 3 {
		t.Fatalf("in use %d, want 3", inUse(rn, "catalog"))
	}
	rn.r.Ledger.Release(tokens[0], permit.AccessLog)
	tokens[0] = grant(t, rn, "catalog", "")
	for _, tok := range tokens {
		rn.r.Ledger.Release(tok, permit.AccessLog)
	}
}

// listen.grpc_max_concurrent_streams bounds the Checks one connection has
// in flight: with 150 waiting Checks sent on one connection bounded at 100,
// at most 100 are ever queued in the daemon; the rest wait in the client.
func TestHostileConcurrentStreams(t *testing.T) {
	const bound, sent = 100, 150
	rn := start(t, parseConfig(t, fmt.Sprintf(`
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0", grpc_max_concurrent_streams: %d}
bulkheads:
  catalog: {max_concurrent: 1, max_queue: 1000, max_wait: 30s}
`, bound)))
	held := grant(t, rn, "catalog", "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ac := authv3.NewAuthorizationClient(rn.conn)
	results := make(chan string, sent)
	for range sent {
		go func() {
			resp, err := ac.Check(ctx, checkReq("catalog"))
			if err != nil {
				results <- ""
				return
			}
			results <- resp.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue()
		}()
	}
	queued := func() int { return rn.r.Registry.Get("catalog").Snapshot().QueuedTotal() }
	testkit.Eventually(t, "the connection's stream bound reached", func() bool { return queued() == bound })
	// Every Check is sent; the bound holds while they wait.
	for range 20 {
		if q := queued(); q > bound {
			t.Fatalf("%d Checks queued on one connection, bound %d", q, bound)
		}
		time.Sleep(5 * time.Millisecond) // sampling the bound over time
	}
	rn.r.Ledger.Release(held, permit.AccessLog)
	for range sent {
		select {
		case tok := <-results:
			if tok == "" {
				t.Fatal("a Check failed")
			}
			rn.r.Ledger.Release(tok, permit.AccessLog)
		case <-ctx.Done():
			t.Fatal("Checks did not complete")
		}
	}
}

// authz.trusted_priority_sources follows configuration reloads: the trust
// list travels with the Check policy the control plane hands over.
func TestTrustedSourcesReload(t *testing.T) {
	const yaml = `
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
%s
bulkheads:
  catalog: {max_concurrent: 10}
`
	rn := start(t, parseConfig(t, fmt.Sprintf(yaml, "")))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	crit := httpCheck("catalog", "127.0.0.1", map[string]string{"x-bulkhead-priority": "critical"})
	if p := admitAs(t, ctx, rn, crit); p != bulkhead.Normal {
		t.Fatalf("before trusting loopback: admitted as %v", p)
	}
	rn.r.reload(parseConfig(t, fmt.Sprintf(yaml, `authz: {trusted_priority_sources: ["127.0.0.0/8"]}`)), nil)
	if p := admitAs(t, ctx, rn, crit); p != bulkhead.Critical {
		t.Fatalf("after trusting loopback: admitted as %v", p)
	}
	rn.r.reload(parseConfig(t, fmt.Sprintf(yaml, `authz: {deny_status: 429}`)), nil)
	if p := admitAs(t, ctx, rn, crit); p != bulkhead.Normal {
		t.Fatalf("after the trust was removed: admitted as %v", p)
	}
}

// A reload logs the warnings of the configuration it applies (a deprecated
// setting), each once, as the daemon does at start.
func TestReloadLogsWarnings(t *testing.T) {
	const yaml = `
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
%s
bulkheads:
  catalog: {max_concurrent: 10}
`
	var log testkit.SyncBuffer
	rn := startLogged(t, parseConfig(t, fmt.Sprintf(yaml, "")), slog.New(slog.NewTextHandler(&log, nil)))
	next := parseConfig(t, fmt.Sprintf(yaml, "ledger: {on_unavailable: local_share}"))
	if len(next.Warnings) != 1 {
		t.Fatalf("warnings %q, want one", next.Warnings)
	}
	rn.r.reload(next, nil)
	if n := strings.Count(log.String(), "level=WARN msg=\"configuration: deprecated setting\""); n != 1 ||
		!strings.Contains(log.String(), "ledger.on_unavailable: is deprecated") {
		t.Fatalf("%d deprecation warnings logged, want 1 naming ledger.on_unavailable:\n%s", n, log.String())
	}
}
