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
// health watches, the shares' RTDS and LRS streams) at shutdown. Envoy
// never closes its access-log streams, so without this GracefulStop would
// not return, and Stop, the only other way to end them, closes every
// connection at once and drops the answers of Checks that have just
// completed but are not yet written.
//
// After stop, the interceptor ends every stream, running or new, with
// Unavailable: it writes the stream's status itself, from outside the
// handler, and gRPC then cancels the stream's context, so that a Recv
// blocked in the handler returns and the handler ends. The handler runs in
// the goroutine gRPC gave its stream, with no goroutine of its own (one
// per stream was 4 of the 14 goroutines each Envoy cost the daemon:
// docs/performance.md, issue 28).
//
// sever ends the access-log streams running at the time the same way, and
// leaves the others (health watches) alone.
type streams struct {
	stopped context.Context    // done once stop was called
	stop    context.CancelFunc // makes every streaming RPC, running or new, end with Unavailable

	mu            sync.Mutex
	severed       context.Context // done once sever was called, then replaced
	cancelSevered context.CancelFunc
}

// statusWriter is the transport stream of grpc-go's HTTP/2 server
// (grpc.ServerTransportStreamFromContext): it writes a stream's status,
// and ends it, from any goroutine, as gRPC's own deadline timer does.
// TestStreamsStop and TestStreamsSever fail if gRPC's stream lost it.
type statusWriter interface {
	WriteStatus(*status.Status) error
}

func newStreams() *streams {
	s := &streams{}
	s.stopped, s.stop = context.WithCancel(context.Background())
	s.severed, s.cancelSevered = context.WithCancel(context.Background())
	return s
}

var (
	stoppedStatus = status.New(codes.Unavailable, "bulkhead: shutting down")
	severedStatus = status.New(codes.Unavailable, "bulkhead: this replica cannot reach the shared ledger")
)

func (s *streams) interceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if s.stopped.Err() != nil {
		return stoppedStatus.Err()
	}
	if w, ok := grpc.ServerTransportStreamFromContext(ss.Context()).(statusWriter); ok {
		unstop := context.AfterFunc(s.stopped, func() { _ = w.WriteStatus(stoppedStatus) })
		defer unstop()
		if info.FullMethod == accesslog.StreamMethod {
			s.mu.Lock()
			severed := s.severed
			s.mu.Unlock()
			unsever := context.AfterFunc(severed, func() { _ = w.WriteStatus(severedStatus) })
			defer unsever()
		}
	}
	return h(srv, ss)
}

// sever makes every access-log stream running now end with Unavailable
// (Envoy opens a new one with its next entry); later ones are not affected.
func (s *streams) sever() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelSevered()
	s.severed, s.cancelSevered = context.WithCancel(context.Background())
}
