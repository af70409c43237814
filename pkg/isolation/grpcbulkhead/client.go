package grpcbulkhead

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// UnaryClientInterceptor guards every unary call of a ClientConn (one
// dependency) with lim: the call holds a permit while it runs.
func UnaryClientInterceptor(lim *bulkhead.Limiter, opts ...Option) grpc.UnaryClientInterceptor {
	o := buildOptions(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) (err error) {
		g, err := o.acquire(ctx, lim, o.outgoingPriority(ctx))
		if err != nil {
			return err
		}
		returned := false
		defer func() { g.end(!returned || serverFault(err)) }()
		err = invoker(ctx, method, req, reply, cc, callOpts...)
		returned = true
		return err
	}
}

// StreamClientInterceptor guards every stream of a ClientConn with lim: the
// stream holds a permit from its creation until RecvMsg reports its end or
// ctx ends.
func StreamClientInterceptor(lim *bulkhead.Limiter, opts ...Option) grpc.StreamClientInterceptor {
	o := buildOptions(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		g, err := o.acquire(ctx, lim, o.outgoingPriority(ctx))
		if err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, callOpts...)
		if err != nil {
			g.end(serverFault(err))
			return nil, err
		}
		s := &clientStream{ClientStream: cs, g: g, serverStreams: desc.ServerStreams}
		// The stream is over when its context ends, read or not. AfterFunc
		// starts no goroutine until then.
		s.stop = context.AfterFunc(ctx, func() { g.end(false) })
		return s, nil
	}
}

// clientStream gives the permit back when the stream ends.
type clientStream struct {
	grpc.ClientStream
	g             *guard
	serverStreams bool
	stop          func() bool
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	switch {
	case errors.Is(err, io.EOF):
		s.end(false)
	case err != nil:
		s.end(serverFault(err))
	case !s.serverStreams:
		// The single response of a unary-response stream: gRPC has already
		// read the end of the stream.
		s.end(false)
	}
	return err
}

func (s *clientStream) end(failed bool) {
	s.stop()
	s.g.end(failed)
}
