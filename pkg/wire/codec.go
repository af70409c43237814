package wire

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Unmarshaler is a message that decodes itself from its protobuf encoding.
// UnmarshalWire must not keep b: the codec reuses it once it returns.
type Unmarshaler interface {
	UnmarshalWire(b []byte) error
}

// Encoded is a message already encoded; the codec sends its bytes as they
// are. It must not be changed once handed to gRPC.
type Encoded []byte

// codec is a gRPC codec for messages of the protobuf content-subtype that
// hands Unmarshaler and Encoded values their own way and every other value
// to the standard protobuf codec.
type codec struct{ proto encoding.CodecV2 }

var _ encoding.CodecV2 = codec{}

// ServerCodec is the server option that installs the codec. It is needed by
// servers registering authz.Register and accesslog.Register; other services
// on the same server are not affected.
func ServerCodec() grpc.ServerOption {
	return grpc.ForceServerCodecV2(codec{proto: encoding.GetCodecV2(protocodec.Name)})
}

func (c codec) Name() string { return protocodec.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(Encoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(e)}, nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	u, ok := v.(Unmarshaler)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return u.UnmarshalWire(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return u.UnmarshalWire(buf.ReadOnlyData())
}
