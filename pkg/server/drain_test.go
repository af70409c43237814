package server

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/bulkhead-mesh/bulkhead/pkg/accesslog"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestInflight(t *testing.T) {
	f := newInflight()
	f.wait(context.Background()) // idle: returns at once

	release := make(chan struct{})
	entered := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		_, err := f.interceptor(context.Background(), nil, nil, func(context.Context, any) (any, error) {
			close(entered)
			<-release
			return nil, errors.New("done")
		})
		res <- err
	}()
	<-entered

	// Busy: wait ends with its context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.wait(ctx)

	waited := make(chan struct{})
	go func() { f.wait(context.Background()); close(waited) }()
	select {
	case <-waited:
		t.Fatal("wait returned while a call was in flight")
	default:
	}
	close(release)
	if err := <-res; err == nil || err.Error() != "done" {
		t.Fatalf("interceptor returned %v, want the handler's error", err)
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return after the call ended")
	}
	f.wait(context.Background())
}

// standIn is an access-log service whose handler reads until the stream
// ends, as the real one does, and says when it starts.
type standIn struct{ entered chan struct{} }

var standInDesc = grpc.ServiceDesc{
	ServiceName: "envoy.service.accesslog.v3.AccessLogService",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{StreamName: "StreamAccessLogs", ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			srv.(*standIn).entered <- struct{}{}
			for {
				if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
					if errors.Is(err, io.EOF) {
						return ss.SendMsg(new(emptypb.Empty))
					}
					return err
				}
			}
		}}},
}

// serveStreams serves, through s's interceptor as the Runner does,
// a health service and the stand-in access-log service, over bufconn.
func serveStreams(t *testing.T, s *streams) (*grpc.Server, *grpc.ClientConn, *health.Server, *standIn) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(grpc.ChainStreamInterceptor(s.interceptor), grpc.WaitForHandlers(true))
	als := &standIn{entered: make(chan struct{}, 16)}
	gs.RegisterService(&standInDesc, als)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop(); <-served })
	return gs, conn, hs, als
}

// openLog opens a stand-in access-log stream, sends a message and waits
// until its handler runs.
func openLog(t *testing.T, conn *grpc.ClientConn, als *standIn) grpc.ClientStream {
	t.Helper()
	cs, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true}, accesslog.StreamMethod)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(new(emptypb.Empty)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-als.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the access-log handler did not start")
	}
	return cs
}

// closeLog ends a stream from the client's side and returns its status.
func closeLog(cs grpc.ClientStream) error {
	if err := cs.CloseSend(); err != nil {
		return err
	}
	return cs.RecvMsg(new(emptypb.Empty))
}

// watchHealth opens a health watch and reads its first answer.
func watchHealth(t *testing.T, conn *grpc.ClientConn) healthpb.Health_WatchClient {
	t.Helper()
	w, err := healthpb.NewHealthClient(conn).Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	return w
}

// stop ends the streams running, blocked in Recv, and refuses new ones,
// with Unavailable; unary calls go on; GracefulStop then returns.
func TestStreamsStop(t *testing.T) {
	s := newStreams()
	gs, conn, _, als := serveStreams(t, s)
	log := openLog(t, conn, als)
	watch := watchHealth(t, conn)

	s.stop()
	s.stop() // idempotent
	if err := log.RecvMsg(new(emptypb.Empty)); status.Code(err) != codes.Unavailable {
		t.Fatalf("running access-log stream after stop = %v, want Unavailable", err)
	}
	if _, err := watch.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("running health watch after stop = %v, want Unavailable", err)
	}
	cs, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true}, accesslog.StreamMethod)
	if err != nil {
		t.Fatal(err)
	}
	if err := closeLog(cs); status.Code(err) != codes.Unavailable {
		t.Fatalf("new stream after stop = %v, want Unavailable", err)
	}
	select {
	case <-als.entered:
		t.Fatal("a stream opened after stop reached its handler")
	default:
	}
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a unary call after stop = %v, want its answer", err)
	}

	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop did not return after stop")
	}
}

// sever ends the access-log streams running then, and only those.
func TestStreamsSever(t *testing.T) {
	s := newStreams()
	_, conn, hs, als := serveStreams(t, s)
	log := openLog(t, conn, als)
	watch := watchHealth(t, conn)

	s.sever()
	if err := log.RecvMsg(new(emptypb.Empty)); status.Code(err) != codes.Unavailable {
		t.Fatalf("access-log stream after sever = %v, want Unavailable", err)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health watch after sever = %v, %v; want it running", r, err)
	}
	later := openLog(t, conn, als) // opened after: runs
	if err := closeLog(later); err != nil {
		t.Fatalf("stream opened after sever = %v, want its handler's nil", err)
	}
}

// An access-log stream costs the daemon one goroutine, gRPC's for the
// stream, whatever else it holds (it cost two: docs/performance.md,
// issue 28). Measured with the Runner's server and a real client on one
// connection; the client holds one goroutine per stream of its own.
func TestAccessLogStreamGoroutines(t *testing.T) {
	rn := start(t, parseConfig(t, baseYAML))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := healthpb.NewHealthClient(rn.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err) // connected
	}
	const n = 100
	before := runtime.NumGoroutine()
	for range n {
		stream, err := alsv3.NewAccessLogServiceClient(rn.conn).StreamAccessLogs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&alsv3.StreamAccessLogsMessage{}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, "streams open", func() bool { return gauge(t, rn, "bulkhead_access_log_streams") == n })
	perStream := float64(runtime.NumGoroutine()-before) / n
	if perStream > 2.2 { // the daemon's 1 and the client's 1
		t.Fatalf("%.2f goroutines per open access-log stream, want 2 (one the daemon's, one the client's)", perStream)
	}
	t.Logf("%.2f goroutines per open access-log stream, the client's included", perStream)
}
