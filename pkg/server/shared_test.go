package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func sharedYAML(addr, policy string) string {
	return fmt.Sprintf(`
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
leases: {default_ttl: 30s, sweep_interval: 50ms}
ledger: {backend: redis, on_unavailable: %s, redis: {address: %q, timeout: 200ms}}
bulkheads:
  auth: {max_concurrent: 2, max_queue: 0}
`, policy, addr)
}

// perRequestYAML is sharedYAML without capacity leases: every Check takes
// the per-request path, and the policy decides each one while Redis is
// down.
func perRequestYAML(addr, policy string) string {
	return strings.Replace(sharedYAML(addr, policy), "timeout: 200ms}", "timeout: 200ms, capacity_leases: false}", 1)
}

// sharedEnd is an end entry of token, carrying its bulkhead as Envoy does.
func sharedEnd(token, key string) *alsv3.StreamAccessLogsMessage {
	meta := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{permit.MetadataNamespace: {Fields: map[string]*structpb.Value{
		permit.MetadataToken: structpb.NewStringValue(token), permit.MetadataBulkhead: structpb.NewStringValue(key)}}}}
	return logMsg("test", &datav3.HTTPAccessLogEntry{
		CommonProperties: &datav3.AccessLogCommon{AccessLogType: datav3.AccessLogType_DownstreamEnd, Metadata: meta},
		Response:         &datav3.HTTPResponseProperties{ResponseCode: wrapperspb.UInt32(200)},
	})
}

// check sends a Check for key and returns the token ("" when admitted
// without one) and the rejection reason ("" when admitted).
func check(t *testing.T, rn *running, key string) (token, reason string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := authv3.NewAuthorizationClient(rn.conn).Check(ctx, checkReq(key))
	if err != nil {
		t.Fatalf("Check(%s): %v", key, err)
	}
	if d := resp.GetDeniedResponse(); d != nil {
		for _, h := range d.GetHeaders() {
			if h.GetHeader().GetKey() == authz.HeaderReason {
				return "", h.GetHeader().GetValue()
			}
		}
		t.Fatalf("denied without a reason: %v", resp)
	}
	return resp.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue(), ""
}

func waitStrict(t *testing.T, rn *running) {
	t.Helper()
	testkit.Eventually(t, "shared ledger strict", func() bool { return rn.r.replica.Ledger.State() == admission.Strict })
}

// One limit over two replicas on the per-request path: each Check a script
// in Redis, a release through the other replica's stream.
func TestSharedLedgerOneLimitAcrossReplicas(t *testing.T) {
	srv := testkit.StartRedis(t)
	a := start(t, parseConfig(t, perRequestYAML(srv.Addr, "fail_closed")))
	b := start(t, parseConfig(t, perRequestYAML(srv.Addr, "fail_closed")))
	waitStrict(t, a)
	waitStrict(t, b)
	t1, r1 := check(t, a, "auth")
	_, r2 := check(t, b, "auth")
	_, r3 := check(t, a, "auth")
	if t1 == "" || r1 != "" || r2 != "" || r3 != "queue_full" {
		t.Fatalf("three Checks on a limit of 2 over two replicas: reasons %q %q %q", r1, r2, r3)
	}
	// Either replica's admin API shows the ledger and every replica's permits.
	testkit.Eventually(t, "b's admin API shows both permits", func() bool {
		resp, err := b.http.Get("http://" + b.addrs["admin"] + "/v1/bulkheads")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var list struct {
			Bulkheads []struct {
				Name  string `json:"name"`
				InUse int    `json:"in_use"`
			} `json:"bulkheads"`
			Ledger struct {
				Backend, State string
				CapacityLeases *bool `json:"capacity_leases"`
			} `json:"ledger"`
		}
		if json.NewDecoder(resp.Body).Decode(&list) != nil || len(list.Bulkheads) != 1 {
			return false
		}
		// capacity_leases: false in perRequestYAML, and the API says so.
		return list.Ledger.Backend == "redis" && list.Ledger.State == "strict" && list.Ledger.CapacityLeases != nil &&
			!*list.Ledger.CapacityLeases && list.Bulkheads[0].InUse == 2
	})
	// The release reaches the ledger through the other replica's stream.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := alsv3.NewAccessLogServiceClient(b.conn).StreamAccessLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(sharedEnd(t1, "auth")); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	// Releases do not hold up the stream: the count follows shortly.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	testkit.Eventually(t, "the release applied in Redis", func() bool {
		n, err := rdb.HGet(context.Background(), "bulkhead:{auth}:s", "inuse").Int()
		return err == nil && n == 1
	})
	if _, r := check(t, b, "auth"); r != "" {
		t.Fatalf("Check after the release: %q", r)
	}
	if n := counter(t, b, "bulkhead_releases_total", "unknown"); n != 0 {
		t.Fatalf("%v releases counted unknown: the shared release was also tried in the local ledger", n)
	}
	if got := counter(t, a, "bulkhead_ledger_info", "redis"); got != 1 {
		t.Fatalf("bulkhead_ledger_info{backend=redis} = %v", got)
	}
}

func TestSharedLedgerUnavailablePolicies(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   []string // reasons of three Checks with Redis down ("" admitted, "-" admitted without a permit)
	}{
		{"fail_closed", []string{"ledger_unavailable", "ledger_unavailable", "ledger_unavailable"}},
		{"fail_open", []string{"-", "-", "-"}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := testkit.StartRedis(t)
			rn := start(t, parseConfig(t, perRequestYAML(srv.Addr, tc.policy)))
			waitStrict(t, rn)
			srv.Kill()
			var got []string
			for range 3 {
				tok, r := check(t, rn, "auth")
				if r == "" && tok == "" {
					r = "-"
				}
				got = append(got, r)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("with Redis down: %q, want %q", got, tc.want)
			}
			if rn.r.replica.Ledger.State() != admission.Unavailable {
				t.Fatalf("state %v", rn.r.replica.Ledger.State())
			}
			if got := counter(t, rn, "bulkhead_ledger_state", "unavailable"); got != 1 {
				t.Fatalf("bulkhead_ledger_state{state=unavailable} = %v", got)
			}
			srv.Start()
			waitStrict(t, rn)
		})
	}
}

// An admin override sent to one replica applies at every replica, and so
// does its reset.
func TestSharedLedgerOverridesReachEveryReplica(t *testing.T) {
	srv := testkit.StartRedis(t)
	a := start(t, parseConfig(t, sharedYAML(srv.Addr, "fail_closed")))
	b := start(t, parseConfig(t, sharedYAML(srv.Addr, "fail_closed")))
	waitStrict(t, a)
	waitStrict(t, b)
	req, err := http.NewRequest(http.MethodPatch, "http://"+a.addrs["admin"]+"/v1/bulkheads/auth", strings.NewReader(`{"max_concurrent": 5}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH: %d", resp.StatusCode)
	}
	limit := func(rn *running) int { return rn.r.Registry.Get("auth").Settings().MaxConcurrent }
	testkit.Eventually(t, "the other replica resized", func() bool { return limit(b) == 5 })
	// A replica that starts later takes the override in force.
	c := start(t, parseConfig(t, sharedYAML(srv.Addr, "fail_closed")))
	testkit.Eventually(t, "a new replica resized", func() bool { return limit(c) == 5 })
	req, _ = http.NewRequest(http.MethodDelete, "http://"+b.addrs["admin"]+"/v1/bulkheads/auth/override", nil)
	resp, err = b.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	testkit.Eventually(t, "the reset reached every replica", func() bool { return limit(a) == 2 && limit(c) == 2 })
}

// A replica that stops takes its circuit breaker windows out of Redis
// before it closes the client (the others stop counting them at once).
func TestSharedStopLeavesNoBreakerWindow(t *testing.T) {
	srv := testkit.StartRedis(t)
	yaml := strings.Replace(sharedYAML(srv.Addr, "fail_closed"), "max_queue: 0}", "max_queue: 0, circuit_breaker: {failure_ratio: 0.5}}", 1)
	rn := start(t, parseConfig(t, yaml))
	waitStrict(t, rn)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	key, replica := "bulkhead:{auth}:breaker", rn.r.replica.Store.Replica
	testkit.Eventually(t, "breaker window shared", func() bool { return rdb.HExists(context.Background(), key, replica).Val() })
	if _, err := rn.stop(t); err != nil {
		t.Fatal(err)
	}
	if ok, err := rdb.HExists(context.Background(), key, replica).Result(); err != nil || ok {
		t.Errorf("this replica's breaker window after it stopped: %v %v, want gone", ok, err)
	}
}

// on_unavailable: local_share is read as capacity leases with fail_closed:
// a replica cut off from Redis admits within the lease it holds, until the
// lease's end, and rejects beyond it (ledger_unavailable).
func TestLocalShareIsCapacityLeases(t *testing.T) {
	srv := testkit.StartRedis(t)
	cfg := parseConfig(t, strings.Replace(sharedYAML(srv.Addr, "local_share"), "max_concurrent: 2", "max_concurrent: 8", 1))
	if !cfg.Ledger.Redis.CapacityLeases || cfg.Ledger.OnUnavailable != admission.FailClosed || len(cfg.Warnings) != 1 {
		t.Fatalf("local_share read as capacity_leases %v, on_unavailable %v, warnings %q; want true, fail_closed, one warning",
			cfg.Ledger.Redis.CapacityLeases, cfg.Ledger.OnUnavailable, cfg.Warnings)
	}
	rn := start(t, cfg)
	waitStrict(t, rn)
	if rn.r.replica.Capacity == nil {
		t.Fatal("no capacity leases with on_unavailable local_share")
	}
	if li := rn.r.ledgerInfo(); !li.CapacityLeases || li.OnUnavailable != "fail_closed" {
		t.Fatalf("the admin API's ledger: %+v, want capacity leases with fail_closed", li)
	}
	// A permit in use keeps the lease from being parked.
	if tok, r := check(t, rn, "auth"); tok == "" || r != "" {
		t.Fatalf("Check with Redis up: token %q, reason %q", tok, r)
	}
	lease := func() (permits, inUse int) {
		rn.r.replica.Capacity.EachLease(func(name string, p, u int, _ uint64) {
			if name == "auth" {
				permits, inUse = p, u
			}
		})
		return permits, inUse
	}
	testkit.Eventually(t, "a lease with room beyond the permit in use", func() bool { p, u := lease(); return u == 1 && p > u })
	srv.Kill()
	admitted := 0
	for {
		p, u := lease()
		if p == 0 || u >= p {
			break
		}
		tok, r := check(t, rn, "auth")
		if tok == "" || r != "" {
			// The lease ended between the look and the Check.
			if p, _ := lease(); p == 0 && r == "ledger_unavailable" {
				break
			}
			t.Fatalf("Check within the lease, Redis down: token %q, reason %q", tok, r)
		}
		admitted++
	}
	if admitted == 0 {
		t.Fatal("no Check admitted within the lease while Redis was down")
	}
	testkit.Eventually(t, "the lease's end", func() bool { p, _ := lease(); return p == 0 })
	if tok, r := check(t, rn, "auth"); tok != "" || r != "ledger_unavailable" {
		t.Fatalf("Check beyond the lease, Redis down: token %q, reason %q; want ledger_unavailable (fail_closed)", tok, r)
	}
}
