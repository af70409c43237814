package wire

import (
	"sync"

	loadstats "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
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
// hands Unmarshaler and Encoded values their own way, decodes an LRS
// LoadStatsRequest without its node's body (UnmarshalLoadStats), and every
// other value with the standard protobuf codec.
type codec struct{ proto encoding.CodecV2 }

var _ encoding.CodecV2 = codec{}

// ServerCodec is the server option that installs the codec. It is needed by
// servers registering authz.Register and accesslog.Register; other services
// on the same server are not affected, but for LRS (shares.Register),
// whose requests' nodes are read for their id only.
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
	switch m := v.(type) {
	case Unmarshaler:
		return withBytes(data, m.UnmarshalWire)
	case *loadstats.LoadStatsRequest:
		return withBytes(data, func(b []byte) error { return UnmarshalLoadStats(b, m) })
	}
	return c.proto.Unmarshal(data, v)
}

// withBytes calls decode with data as one slice, valid during the call: a
// message that came in pieces (a load report of 61 KB comes in four HTTP/2
// frames) is copied into a scratch buffer, reused. Not one of gRPC's
// pools: those clear a buffer each time it is taken, which cost more than
// the copy.
func withBytes(data mem.BufferSlice, decode func([]byte) error) error {
	if len(data) == 1 {
		return decode(data[0].ReadOnlyData())
	}
	sp := scratch.Get().(*[]byte)
	b := (*sp)[:0]
	for _, d := range data {
		b = append(b, d.ReadOnlyData()...)
	}
	err := decode(b)
	if cap(b) <= maxScratch {
		*sp = b[:0]
		scratch.Put(sp)
	}
	return err
}

// scratch holds the buffers of withBytes, up to maxScratch bytes each.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

const maxScratch = 1 << 20
