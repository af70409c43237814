package server

import (
	"context"
	"testing"
	"time"

	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// A replica that cannot reach the shared ledger does not keep the data
// plane: its gRPC health check fails (Envoy sends Checks and new streams to
// the other replicas), its access-log streams are closed, and a stream that
// brings an entry only Redis could serve is closed too. Redis is paused
// (SIGSTOP: TCP holds the bytes, nothing is refused), then resumed. On the
// per-request path, so that the permit is Redis's (one admitted from a
// capacity lease is released by the replica that holds the lease).
func TestUnreachableLedgerMovesTheDataPlane(t *testing.T) {
	srv := testkit.StartRedis(t)
	rn := start(t, parseConfig(t, perRequestYAML(srv.Addr, "fail_closed")))
	waitStrict(t, rn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(rn.conn)
	serving := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("gRPC health: %v", err)
		}
		return r.GetStatus()
	}
	testkit.Eventually(t, "health SERVING once strict", func() bool { return serving() == healthpb.HealthCheckResponse_SERVING })
	tok, _ := check(t, rn, "auth")
	als := alsv3.NewAccessLogServiceClient(rn.conn)
	open, err := als.StreamAccessLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := open.Send(sharedEnd("AAAAAAAAAAAAAAAAAAAAAA", "auth")); err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	t.Cleanup(srv.Continue)
	if _, r := check(t, rn, "auth"); r != "ledger_unavailable" {
		t.Fatalf("Check with Redis paused: reason %q, want ledger_unavailable", r)
	}
	if s := rn.r.replica.Ledger.State(); s != admission.Unavailable {
		t.Fatalf("ledger %v after a call that timed out", s)
	}
	if s := serving(); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("gRPC health %v while the ledger is unavailable, want NOT_SERVING", s)
	}
	if _, err := open.CloseAndRecv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("the stream open when Redis went away ended with %v, want Unavailable", err)
	}
	// A new stream whose entry only Redis could serve is closed too.
	late, err := als.StreamAccessLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := late.Send(sharedEnd(tok, "auth")); err != nil {
		t.Fatal(err)
	}
	if _, err := late.CloseAndRecv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("a stream bringing a release with Redis away ended with %v, want Unavailable", err)
	}
	if n := counter(t, rn, "bulkhead_access_log_entries_total", "ledger_unavailable"); n < 1 {
		t.Fatalf("entries counted ledger_unavailable: %v, want the release's", n)
	}

	srv.Continue()
	testkit.Eventually(t, "health SERVING when strict again", func() bool { return serving() == healthpb.HealthCheckResponse_SERVING })
	ok, err := als.StreamAccessLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ok.Send(sharedEnd(tok, "auth")); err != nil {
		t.Fatal(err)
	}
	if _, err := ok.CloseAndRecv(); err != nil {
		t.Fatalf("a stream with Redis back: %v", err)
	}
}
