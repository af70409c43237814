package grpcbulkhead

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	methodCheck = "/grpc.health.v1.Health/Check"
	methodWatch = "/grpc.health.v1.Health/Watch"
)

// byMethod: Check and Watch have bulkheads, List names an unknown one.
func byMethod(m string) string {
	switch m {
	case methodCheck:
		return "check"
	case methodWatch:
		return "watch"
	case "/grpc.health.v1.Health/List":
		return "nope"
	}
	return ""
}

// healthServer blocks Check and Watch until release is closed (or the call
// ends); entered gets one value per call that reached the handler.
type healthServer struct {
	healthpb.UnimplementedHealthServer
	entered chan string
	release chan struct{}
	once    sync.Once
}

func (h *healthServer) open() { h.once.Do(func() { close(h.release) }) }

func (h *healthServer) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.entered <- "check"
	select {
	case <-h.release:
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (h *healthServer) Watch(_ *healthpb.HealthCheckRequest, s grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	h.entered <- "watch"
	if err := s.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
		return err
	}
	select {
	case <-h.release:
		return nil
	case <-s.Context().Done():
		return status.FromContextError(s.Context().Err()).Err()
	}
}

// setup serves a healthServer over bufconn with serverOpts and returns a
// client dialled with dialOpts.
func setup(t *testing.T, serverOpts []grpc.ServerOption, dialOpts ...grpc.DialOption) (healthpb.HealthClient, *healthServer) {
	t.Helper()
	srv := grpc.NewServer(serverOpts...)
	hs := &healthServer{entered: make(chan string, 64), release: make(chan struct{})}
	healthpb.RegisterHealthServer(srv, hs)
	conn := testkit.ServeBufconn(t, srv).Dial(t, dialOpts...)
	t.Cleanup(hs.open) // first: let held calls end before the server stops
	return healthpb.NewHealthClient(conn), hs
}

func registry(t *testing.T, want map[string]bulkhead.Settings) *bulkhead.Registry {
	t.Helper()
	r := bulkhead.NewRegistry()
	if _, err := r.Apply(want); err != nil {
		t.Fatal(err)
	}
	return r
}

func wait[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
		var zero T
		return zero
	}
}

func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

type observer struct {
	mu                         sync.Mutex
	admitted, finished, failed int
}

func (o *observer) Admitted(string, time.Duration) { o.mu.Lock(); o.admitted++; o.mu.Unlock() }

func (o *observer) Finished(_ string, _ time.Duration, failed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished++
	if failed {
		o.failed++
	}
}

func (o *observer) counts() (int, int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.admitted, o.finished, o.failed
}
