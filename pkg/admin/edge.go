package admin

import (
	"context"
	"crypto/tls"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// authGRPC authenticates a gRPC call from its metadata and peer.
func (s *Server) authGRPC(ctx context.Context) (context.Context, caller, error) {
	var authz, remote string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			authz = v[0]
		}
	}
	var state *tls.ConnectionState
	if p, ok := peer.FromContext(ctx); ok {
		if p.Addr != nil {
			remote = p.Addr.String()
		}
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			state = &ti.State
		}
	}
	c, err := s.auth.authenticate(authz, state, remote)
	if err != nil {
		return ctx, c, err
	}
	return withCaller(ctx, c), c, nil
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, c, err := s.authGRPC(ctx)
	if err == nil {
		var resp any
		resp, err = handler(ctx, req)
		if err == nil {
			return resp, nil
		}
	}
	err = toStatus(err)
	s.refused(ctx, info.FullMethod, c.remote, err)
	return nil, err
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, c, err := s.authGRPC(ss.Context())
	if err == nil {
		err = handler(srv, &authedStream{ss, ctx})
		if err == nil {
			return nil
		}
	}
	err = toStatus(err)
	s.refused(ctx, info.FullMethod, c.remote, err)
	return err
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (a *authedStream) Context() context.Context { return a.ctx }

// refused logs a call that ended in an error: at warn for the caller's
// mistakes (credentials, arguments, limits), info for an unknown bulkhead,
// error for the server's own failures. Cancellation and shutdown are not
// logged.
func (s *Server) refused(ctx context.Context, op, remote string, err error) {
	st := status.Convert(err)
	level := slog.LevelWarn
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable:
		return
	case codes.NotFound:
		level = slog.LevelInfo
	case codes.Internal, codes.Unknown:
		level = slog.LevelError
	}
	s.log.Log(ctx, level, "admin call refused", "op", op, "remote", remote, "code", st.Code().String(), "error", st.Message())
}
