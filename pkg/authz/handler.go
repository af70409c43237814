package authz

import (
	"context"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
)

// Register registers s as envoy.service.auth.v3.Authorization on gs. The
// gRPC server must be built with wire.ServerCodec(): Checks are read
// straight from their encoding (request.UnmarshalWire) and admissions sent
// pre-encoded, which is what the daemon does per request besides the
// limiter. Without the codec every Check fails with INTERNAL.
func Register(gs grpc.ServiceRegistrar, s *Server) {
	gs.RegisterService(&serviceDesc, s)
}

// serviceDesc is authv3.Authorization_ServiceDesc with checkHandler.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: authv3.Authorization_ServiceDesc.ServiceName,
	HandlerType: (*authv3.AuthorizationServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Check", Handler: checkHandler}},
	Metadata:    authv3.Authorization_ServiceDesc.Metadata,
}

func checkHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*Server)
	pol := s.policy.Load()
	r := newRequest(pol)
	if err := dec(r); err != nil {
		return nil, err
	}
	handle := func(ctx context.Context, req any) (any, error) {
		a, err := s.check(ctx, pol, req.(*request))
		if err != nil {
			return nil, err
		}
		return a.encoded(), nil
	}
	if interceptor == nil {
		return handle(ctx, r)
	}
	return interceptor(ctx, r, &grpc.UnaryServerInfo{Server: srv, FullMethod: authv3.Authorization_Check_FullMethodName}, handle)
}

// newRequest returns a request that keeps the headers pol names.
func newRequest(pol *Policy) *request {
	return &request{priorityHeader: pol.PriorityHeader, tenantHeader: pol.TenantHeader}
}
