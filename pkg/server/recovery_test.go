package server

import (
	"context"
	"testing"
	"time"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// A restarted daemon admits no one during its recovery window, adopts the
// permits of requests that were running (their periodic entries say so),
// and then admits within the limit, counting them: the limit holds across
// the restart.
func TestRecoveryWindowAdoptsBeforeAdmitting(t *testing.T) {
	const yaml = `
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
leases: {sweep_interval: 20ms, heartbeat_interval: 100ms, heartbeat_ttl: 2s, recovery_window: 400ms}
bulkheads:
  catalog: {max_concurrent: 1, max_queue: 5, max_wait: 5s}
`
	rn := startRecovering(t, parseConfig(t, yaml))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got := counter(t, rn, "bulkhead_admissions_paused", ""); got != 1 {
		t.Fatalf("bulkhead_admissions_paused = %v at start, want 1", got)
	}
	// A Check arriving at once waits for the window.
	checked := make(chan *authv3.CheckResponse, 1)
	go func() {
		resp, err := authv3.NewAuthorizationClient(rn.conn).Check(ctx, checkReq("catalog"))
		if err != nil {
			t.Error(err)
		}
		checked <- resp
	}()
	testkit.Eventually(t, "the Check to queue", func() bool { return rn.r.Registry.Get("catalog").Snapshot().QueuedTotal() == 1 })
	// Meanwhile a request granted by the previous process reports itself.
	const old = "AAAAAAAAAAAAAAAAAAAAAA"
	entry := func(typ datav3.AccessLogType) *datav3.HTTPAccessLogEntry {
		e := logEntry(permit.MetadataNamespace, old, typ)
		e.CommonProperties.Metadata.FilterMetadata[permit.MetadataNamespace].Fields[permit.MetadataBulkhead] =
			structpb.NewStringValue("catalog")
		return e
	}
	stream, err := alsv3.NewAccessLogServiceClient(rn.conn).StreamAccessLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(logMsg("front-proxy", entry(datav3.AccessLogType_DownstreamPeriodic))); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the adoption", func() bool { return inUse(rn, "catalog") == 1 })
	// The window ends: the queued Check still waits, the adopted request
	// holds the only permit.
	testkit.Eventually(t, "the window to end", func() bool { return counter(t, rn, "bulkhead_admissions_paused", "") == 0 })
	if len(checked) != 0 || rn.r.Registry.Get("catalog").Snapshot().QueuedTotal() != 1 {
		t.Fatal("a Check was admitted past the limit with a request adopted")
	}
	holders, _ := rn.r.Ledger.Holders("catalog", 10)
	if len(holders) != 1 || !holders[0].Adopted || holders[0].Node != "front-proxy" {
		t.Fatalf("holders = %+v, want the adopted permit of front-proxy", holders)
	}
	// The old request ends: the waiting Check gets its permit.
	if err := stream.Send(logMsg("", entry(datav3.AccessLogType_DownstreamEnd))); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-checked:
		if resp.GetOkResponse() == nil {
			t.Fatalf("Check = %v, want admitted", resp)
		}
	case <-ctx.Done():
		t.Fatal("the Check was not admitted after the adopted permit's release")
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, rn, "bulkhead_permits_adopted_total", "catalog"); got != 1 {
		t.Fatalf("adopted = %v, want 1", got)
	}
}
