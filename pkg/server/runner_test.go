package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func checkReq(key string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{ContextExtensions: map[string]string{"bulkhead": key}}}
}

func endEntry(token string) *alsv3.StreamAccessLogsMessage {
	meta := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{permit.MetadataNamespace: {Fields: map[string]*structpb.Value{
		permit.MetadataToken: structpb.NewStringValue(token)}}}}
	return &alsv3.StreamAccessLogsMessage{
		Identifier: &alsv3.StreamAccessLogsMessage_Identifier{Node: &corev3.Node{Id: "test"}, LogName: "bulkhead"},
		LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{
			LogEntry: []*datav3.HTTPAccessLogEntry{{
				CommonProperties: &datav3.AccessLogCommon{AccessLogType: datav3.AccessLogType_DownstreamEnd, Metadata: meta},
				Response:         &datav3.HTTPResponseProperties{ResponseCode: wrapperspb.UInt32(200)},
			}},
		}},
	}
}

func TestRunServes(t *testing.T) {
	rn := start(t, parseConfig(t, baseYAML))
	for _, k := range []string{"grpc", "http"} {
		if h, p, err := net.SplitHostPort(rn.addrs[k]); err != nil || h != "127.0.0.1" || p == "0" {
			t.Fatalf("address file %s = %q", k, rn.addrs[k])
		}
	}
	if code, body := rn.get(t, "/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if code, body := rn.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz = %d %q", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hr, err := healthpb.NewHealthClient(rn.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health = %v, %v", hr, err)
	}

	// A Check takes a permit; its access log gives it back.
	resp, err := authv3.NewAuthorizationClient(rn.conn).Check(ctx, checkReq("catalog"))
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("Check = %v, %v", resp, err)
	}
	if rn.r.Ledger.Len() != 1 || rn.r.Registry.Get("catalog").Snapshot().InUse != 1 {
		t.Fatal("the Check holds no permit")
	}
	stream, err := alsv3.NewAccessLogServiceClient(rn.conn).StreamAccessLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(endEntry(resp.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue())); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	if rn.r.Ledger.Len() != 0 || rn.r.Registry.Get("catalog").Snapshot().InUse != 0 {
		t.Fatal("the access log did not release the permit")
	}

	// An unknown bulkhead is a denial with the default status.
	resp, err = authv3.NewAuthorizationClient(rn.conn).Check(ctx, checkReq("nope"))
	if err != nil || resp.GetDeniedResponse().GetStatus().GetCode() != 503 {
		t.Fatalf("unknown bulkhead: %v, %v", resp, err)
	}

	code, body := rn.get(t, "/metrics")
	for _, want := range []string{
		`bulkhead_limit{dependency="catalog"} 10`,
		`bulkhead_limit{dependency="auth"} 1`,
		`bulkhead_admitted_total{dependency="catalog",priority="normal"} 1`,
		`bulkhead_releases_total{source="access_log"} 1`,
		`bulkhead_success_total{dependency="catalog"} 1`,
		`bulkhead_rejected_total{dependency="_unknown",reason="unknown_bulkhead"} 1`,
		`bulkhead_config_reloads_total{result="success"} 1`,
		"go_goroutines", "process_",
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}

	if took, err := rn.stop(t); err != nil || took > 3*time.Second {
		t.Fatalf("Run after cancel = %v after %v; want nil, promptly", err, took)
	}
	noHandlersLeft(t)
}

// noHandlersLeft fails if an RPC handler is still running: Run returns
// only after every goroutine it started has stopped.
func noHandlersLeft(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, fn := range []string{"accesslog.(*Server).StreamAccessLogs", "authz.(*Server).check", "(*Ledger).Run"} {
		if strings.Contains(stacks, fn) {
			t.Errorf("after Run returned, a goroutine still runs %s", fn)
		}
	}
}

// Shutdown with an access-log stream held open by a client and a Check
// queued without a deadline: Run returns nil within the drain timeout,
// the Check is cancelled, the stream is closed.
func TestShutdownWithOpenStreamAndQueuedCheck(t *testing.T) {
	const drain = 300 * time.Millisecond
	rn := start(t, parseConfig(t, baseYAML), WithDrainTimeout(drain))
	ctx := context.Background()
	ac := authv3.NewAuthorizationClient(rn.conn)

	resp, err := ac.Check(ctx, checkReq("auth"))
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("Check = %v, %v", resp, err)
	}
	queued := make(chan error, 1)
	go func() {
		resp, err := ac.Check(ctx, checkReq("auth"))
		if err == nil && resp.GetOkResponse() != nil {
			err = errors.New("a queued Check was admitted during shutdown")
		}
		queued <- err
	}()
	testkit.Eventually(t, "Check queued", func() bool { return rn.r.Registry.Get("auth").Snapshot().QueuedTotal() == 1 })

	stream, err := alsv3.NewAccessLogServiceClient(rn.conn).StreamAccessLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&alsv3.StreamAccessLogsMessage{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "stream open", func() bool { return gauge(t, rn, "bulkhead_access_log_streams") == 1 })
	watch, err := healthpb.NewHealthClient(rn.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if hr, err := watch.Recv(); err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health watch = %v, %v", hr, err)
	}

	took, err := rn.stop(t)
	if err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if took > drain+3*time.Second {
		t.Fatalf("Run took %v to stop, drain timeout %v", took, drain)
	}
	select {
	case err := <-queued:
		if c := status.Code(err); c != codes.Unavailable && c != codes.Canceled {
			t.Fatalf("queued Check ended with %v, want Unavailable or Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the queued Check was neither answered nor cancelled")
	}
	if _, err := stream.CloseAndRecv(); err == nil {
		t.Fatal("the access-log stream survived shutdown")
	}
	for {
		hr, err := watch.Recv()
		if err != nil {
			break // the watch ended with the server
		}
		if hr.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("health during shutdown = %v", hr.GetStatus())
		}
	}
	if gauge(t, rn, "bulkhead_access_log_streams") != 0 {
		t.Fatal("open-streams gauge not back to 0")
	}
	if s := rn.r.Registry.Get("auth").Snapshot(); s.QueuedTotal() != 0 {
		t.Fatalf("waiters left after shutdown: %+v", s)
	}
	noHandlersLeft(t)
}

// A Check in flight at shutdown gets its answer: here a max_wait timeout
// denial, well within the drain timeout.
func TestShutdownAnswersChecksInFlight(t *testing.T) {
	rn := start(t, parseConfig(t, `
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
bulkheads:
  auth: {max_concurrent: 1, max_queue: 5, max_wait: 300ms}
`), WithDrainTimeout(10*time.Second))
	ac := authv3.NewAuthorizationClient(rn.conn)
	if resp, err := ac.Check(context.Background(), checkReq("auth")); err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("Check = %v, %v", resp, err)
	}
	answered := make(chan *authv3.CheckResponse, 1)
	go func() {
		resp, err := ac.Check(context.Background(), checkReq("auth"))
		if err != nil {
			t.Logf("Check in flight: %v", err)
			resp = nil
		}
		answered <- resp
	}()
	testkit.Eventually(t, "Check queued", func() bool { return rn.r.Registry.Get("auth").Snapshot().QueuedTotal() == 1 })
	took, err := rn.stop(t)
	if err != nil || took > 5*time.Second {
		t.Fatalf("Run = %v after %v", err, took)
	}
	resp := <-answered
	if resp.GetDeniedResponse() == nil {
		t.Fatalf("the Check in flight was not answered with a denial: %v", resp)
	}
	noHandlersLeft(t)
}

// brokenListener accepts nothing and, once broken, fails as a listener
// whose socket went away does.
type brokenListener struct {
	net.Listener
	broken chan struct{}
}

var errListenerBroken = errors.New("listener broken")

func (l *brokenListener) Accept() (net.Conn, error) {
	<-l.broken
	return nil, errListenerBroken
}

// A server that dies ends Run, which shuts the others down in order and
// returns the server's error.
func TestRunReturnsServerError(t *testing.T) {
	for _, name := range []string{"grpc", "http"} {
		t.Run(name, func(t *testing.T) {
			broken := &brokenListener{broken: make(chan struct{})}
			rn := start(t, parseConfig(t, baseYAML), withListen(func(n, addr string) (net.Listener, error) {
				ln, err := net.Listen("tcp", addr)
				if err != nil || n != name {
					return ln, err
				}
				broken.Listener = ln
				return broken, nil
			}))
			close(broken.broken)
			select {
			case err := <-rn.done:
				rn.done <- err // for the cleanup
				if !errors.Is(err, errListenerBroken) {
					t.Fatalf("Run = %v, want %v", err, errListenerBroken)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("Run did not return after its server failed")
			}
			noHandlersLeft(t)
		})
	}
}

func TestRunListenErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, b := "127.0.0.1:0", busy.Addr().String()
	for _, tt := range []struct{ grpc, http, admin, want string }{
		{b, free, free, "listen.grpc"},
		{free, b, free, "listen.http"},
		{free, free, b, "listen.admin"},
	} {
		cfg := parseConfig(t, "listen: {grpc: \""+tt.grpc+"\", http: \""+tt.http+"\", admin: \""+tt.admin+"\"}\n")
		r, err := New(cfg, slogDiscard())
		if err != nil {
			t.Fatal(err)
		}
		err = r.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Fatalf("Run with %s taken = %v, want an error naming %s", tt.want, err, tt.want)
		}
	}
}

func TestAddressFile(t *testing.T) {
	rn := start(t, parseConfig(t, baseYAML))
	// No temp file is left beside the address file.
	entries, err := os.ReadDir(filepath.Dir(rn.r.addressFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "addr.json" {
		t.Fatalf("address file directory holds %v", entries)
	}
	if len(rn.addrs) != 3 || rn.addrs["admin"] == "" {
		t.Fatalf("address file = %v", rn.addrs)
	}
	if _, err := rn.stop(t); err != nil {
		t.Fatal(err)
	}
}

// gauge reads an unlabelled gauge from the runner's registry.
func gauge(t *testing.T, rn *running, name string) float64 {
	t.Helper()
	mfs, err := rn.r.promReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
