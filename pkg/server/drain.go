package server

import (
	"context"
	"sync"

	"google.golang.org/grpc"
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
