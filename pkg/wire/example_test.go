package wire_test

import (
	"fmt"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/bulkhead-mesh/bulkhead/pkg/wire"
)

// Walk an encoded CheckRequest down to the few fields a handler needs (the
// method, the path and a context extension), skipping everything else, as
// authz does, without decoding the message whole.
func ExampleReader() {
	b, err := proto.Marshal(&authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: map[string]string{"bulkhead": "catalog"},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "GET", Path: "/items", Headers: map[string]string{"user-agent": "curl"},
		}},
	}})
	if err != nil {
		panic(err)
	}

	// The field numbers, from envoy/service/auth/v3 and its AttributeContext.
	const (
		checkAttributes protowire.Number = 1  // CheckRequest.attributes
		attrRequest     protowire.Number = 4  // AttributeContext.request
		attrExtensions  protowire.Number = 10 // AttributeContext.context_extensions
		requestHTTP     protowire.Number = 2  // Request.http
		httpMethod      protowire.Number = 2  // HttpRequest.method
		httpPath        protowire.Number = 4  // HttpRequest.path
		bytes                            = protowire.BytesType
	)
	// field returns the payload of the last field num of the message in b,
	// as a full decode keeps the last value.
	field := func(b []byte, num protowire.Number) []byte {
		var v []byte
		r := wire.NewReader(b)
		for r.Next() {
			if r.Is(num, bytes) {
				v = r.Bytes()
			}
		}
		if err := r.Err(); err != nil {
			panic(err)
		}
		return v
	}

	attrs := field(b, checkAttributes)
	http := field(field(attrs, attrRequest), requestHTTP)
	fmt.Printf("%s %s\n", field(http, httpMethod), field(http, httpPath))

	// A map is a repeated message of key/value entries.
	r := wire.NewReader(attrs)
	for r.Next() {
		if r.Is(attrExtensions, bytes) {
			k, v, err := wire.MapEntry(r.Bytes())
			fmt.Printf("extension %s=%s %v\n", k, v, err)
		}
	}

	// A truncated encoding stops the walk with an error: here its one
	// top-level field (attributes) runs past the end.
	n := 0
	for r = wire.NewReader(b[:len(b)-1]); r.Next(); {
		n++
	}
	fmt.Println("truncated:", n, "fields, error:", r.Err() != nil)
	// Output:
	// GET /items
	// extension bulkhead=catalog <nil>
	// truncated: 0 fields, error: true
}
