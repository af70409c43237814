package authz

import (
	"context"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/wire"
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

// encodeAdmitted is admitted(token, key), encoded: status OK, an empty
// ok_response and the dynamic metadata {bulkhead_permit: token,
// bulkhead: key}.
func encodeAdmitted(token, key string) wire.Encoded {
	const (
		fieldStatus   = 1 // CheckResponse.status
		fieldOK       = 3 // CheckResponse.ok_response
		fieldMetadata = 4 // CheckResponse.dynamic_metadata (Struct)
		fieldFields   = 1 // Struct.fields (map<string, Value>)
		fieldString   = 3 // Value.string_value
	)
	valueLen := func(v string) int { return protowire.SizeTag(fieldString) + protowire.SizeBytes(len(v)) }
	entryLen := func(k, v string) int {
		return protowire.SizeTag(wire.MapKey) + protowire.SizeBytes(len(k)) +
			protowire.SizeTag(wire.MapValue) + protowire.SizeBytes(valueLen(v))
	}
	appendEntry := func(b []byte, k, v string) []byte {
		b = protowire.AppendTag(b, fieldFields, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entryLen(k, v)))
		b = protowire.AppendTag(b, wire.MapKey, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, wire.MapValue, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(valueLen(v)))
		b = protowire.AppendTag(b, fieldString, protowire.BytesType)
		return protowire.AppendString(b, v)
	}
	structLen := protowire.SizeTag(fieldFields) + protowire.SizeBytes(entryLen(permit.MetadataToken, token)) +
		protowire.SizeTag(fieldFields) + protowire.SizeBytes(entryLen(permit.MetadataBulkhead, key))
	b := make([]byte, 0, 4+protowire.SizeTag(fieldMetadata)+protowire.SizeBytes(structLen))
	b = protowire.AppendTag(b, fieldStatus, protowire.BytesType)
	b = protowire.AppendVarint(b, 0)
	b = protowire.AppendTag(b, fieldOK, protowire.BytesType)
	b = protowire.AppendVarint(b, 0)
	b = protowire.AppendTag(b, fieldMetadata, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(structLen))
	b = appendEntry(b, permit.MetadataToken, token)
	return appendEntry(b, permit.MetadataBulkhead, key)
}
