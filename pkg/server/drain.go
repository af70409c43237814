package server

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/accesslog"
)

// inflight counts unary RPCs (Checks) in progress so that shutdown can wait
// for them without waiting for the long-lived access-log streams.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n == 0; replaced when n leaves 0
}

func newInflight() *inflight {
	c := make(chan struct{})
	close(c)
	return &inflight{idle: c}
}

func (f *inflight) interceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	f.mu.Lock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.n--
		if f.n == 0 {
			close(f.idle)
		}
		f.mu.Unlock()
	}()
	return h(ctx, req)
}

// wait returns when no unary RPC is in progress or ctx ends.
func (f *inflight) wait(ctx context.Context) {
	for {
		f.mu.Lock()
		idle, n := f.idle, f.n
		f.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return
		}
	}
}

// streams ends long-lived streaming RPCs (Envoy's access-log streams, gRPC
// health watches) at shutdown. Envoy never closes its access-log streams, so
// without this GracefulStop would not return, and Stop, the only other way to
// end them, closes every connection at once and drops the answers of Checks
// that have just completed but are not yet written.
//
// Each streaming handler runs in a goroutine of its own, owned by the
// interceptor until it returns and then by wait. After stop, the interceptor
// returns at once with Unavailable: gRPC then finishes the stream and cancels
// its context, so the handler's blocked Recv returns and the handler ends.
//
// sever ends the access-log streams running at the time the same way, and
// leaves the others (health watches) alone.
type streams struct {
	stopOnce sync.Once
	stopping chan struct{} // closed by stop
	wg       sync.WaitGroup

	mu      sync.Mutex
	severed chan struct{} // closed by sever, then replaced
}

func newStreams() *streams {
	return &streams{stopping: make(chan struct{}), severed: make(chan struct{})}
}

func (s *streams) interceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	select {
	case <-s.stopping:
		return status.Error(codes.Unavailable, "bulkhead: shutting down")
	default:
	}
	var severed chan struct{} // nil: never
	if info.FullMethod == accesslog.StreamMethod {
		s.mu.Lock()
		severed = s.severed
		s.mu.Unlock()
	}
	done := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		done <- h(srv, ss)
	}()
	select {
	case err := <-done:
		return err
	case <-s.stopping:
		return status.Error(codes.Unavailable, "bulkhead: shutting down")
	case <-severed:
		return status.Error(codes.Unavailable, "bulkhead: this replica cannot reach the shared ledger")
	}
}

// sever makes every access-log stream running now end with Unavailable
// (Envoy opens a new one with its next entry); later ones are not affected.
func (s *streams) sever() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.severed)
	s.severed = make(chan struct{})
}

// stop makes every streaming RPC, running or new, end with Unavailable.
func (s *streams) stop() { s.stopOnce.Do(func() { close(s.stopping) }) }

// wait returns when every streaming handler has returned. Call it after the
// gRPC server has stopped.
func (s *streams) wait() { s.wg.Wait() }
