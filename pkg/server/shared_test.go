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

func TestSharedLedgerOneLimitAcrossReplicas(t *testing.T) {
	srv := testkit.StartRedis(t)
	a := start(t, parseConfig(t, sharedYAML(srv.Addr, "fail_closed")))
	b := start(t, parseConfig(t, sharedYAML(srv.Addr, "fail_closed")))
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
			Ledger struct{ Backend, State string } `json:"ledger"`
		}
		if json.NewDecoder(resp.Body).Decode(&list) != nil || len(list.Bulkheads) != 1 {
			return false
		}
		return list.Ledger.Backend == "redis" && list.Ledger.State == "strict" && list.Bulkheads[0].InUse == 2
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
		{"local_share", []string{"", "", "queue_full"}}, // one live replica: its share is the whole limit
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := testkit.StartRedis(t)
			rn := start(t, parseConfig(t, sharedYAML(srv.Addr, tc.policy)))
			waitStrict(t, rn)
			testkit.Eventually(t, "share sized", func() bool { return rn.r.replica.Fallback.Share("auth") != nil })
			srv.Kill()
			if tc.policy == "local_share" {
				// Rejected until the other replicas would hold this one's
				// share back, then admitted within it.
				if _, r := check(t, rn, "auth"); r != "ledger_unavailable" {
					t.Fatalf("local_share at once: %q, want ledger_unavailable", r)
				}
				testkit.Eventually(t, "local share allowed", rn.r.replica.Ledger.LocalShareOK)
			}
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
			// Permits admitted alone were handed to Redis: the limit holds.
			if tc.policy == "local_share" {
				if rn.r.Ledger.Len() != 0 {
					t.Fatalf("%d permits still local after the hand-over", rn.r.Ledger.Len())
				}
				if _, r := check(t, rn, "auth"); r != "queue_full" {
					t.Fatalf("Check after the hand-over of 2 permits of 2: %q, want queue_full", r)
				}
			}
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
