package authz

import (
	"bytes"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// wirePolicy keeps both headers, as a policy with tenants does.
func wirePolicy() *Policy {
	p := DefaultPolicy()
	p.TenantHeader = "x-tenant"
	p = p.normalised()
	return &p
}

// checkRequest is a CheckRequest with the fields a Check reads.
func checkRequest(source string, headers, ext map[string]string) *authv3.CheckRequest {
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request:           &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Headers: headers, Path: "/x"}},
		ContextExtensions: ext,
	}}
	if source != "" {
		req.Attributes.Source = &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: source, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 4242}}}}}
	}
	return req
}

// networkCheck is a CheckRequest as Envoy's network ext_authz filter sends
// it (checked with Envoy 1.40): source and destination addresses, and the
// node's labels as the destination's when bootstrap_metadata_labels_key is
// set. No request, no context_extensions.
func networkCheck(source string, port uint32, labels map[string]string) *authv3.CheckRequest {
	addr := func(host string, port uint32) *corev3.Address {
		return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: addr(source, 40000)},
		Destination: &authv3.AttributeContext_Peer{Address: addr("127.0.0.1", port), Labels: labels},
	}}
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameAsDecoded checks that reading b from the wire gives what decoding it
// whole and reading the message gives, when b decodes at all.
func sameAsDecoded(t *testing.T, pol *Policy, b []byte) {
	t.Helper()
	got := newRequest(pol)
	wireErr := got.UnmarshalWire(b)
	var req authv3.CheckRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		return // a full decode refuses more (invalid UTF-8 anywhere): the wire read may go on
	}
	if wireErr != nil {
		t.Fatalf("UnmarshalWire refused what proto.Unmarshal reads: %v", wireErr)
	}
	want := requestOf(pol, &req)
	got.sourceIsSocket, want.sourceIsSocket = false, false
	if *got != *want {
		t.Fatalf("wire read differs from the decoded message:\n got %+v\nwant %+v", *got, *want)
	}
}

func TestRequestFromWire(t *testing.T) {
	pol := wirePolicy()
	full := checkRequest("10.0.0.7", map[string]string{"x-bulkhead-priority": "critical", "x-tenant": "acme", "accept": "*/*"},
		map[string]string{"bulkhead": "catalog", "priority": "best_effort", "lease_ttl": "2s", "other": "x"})
	pipe := checkRequest("", nil, map[string]string{"bulkhead": "auth"})
	pipe.Attributes.Source = &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: "/tmp/s"}}}}
	socketOnly := checkRequest("192.0.2.1", nil, nil)
	extOnly := checkRequest("", nil, map[string]string{"bulkhead": "orders", "priority": ""})
	network := networkCheck("10.0.0.7", 5432, map[string]string{permit.LabelPriority: "critical", "team": "db"})
	netPipe := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Destination: &authv3.AttributeContext_Peer{
		Address: &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: "/tmp/s"}}}}}}
	emptyValues := checkRequest("", map[string]string{"x-bulkhead-priority": "", "x-tenant": ""}, map[string]string{"lease_ttl": ""})
	tests := []struct {
		name string
		b    []byte
		want request // header names aside
	}{
		{"empty", nil, request{}},
		{"full", marshal(t, full), request{http: true, bulkhead: "catalog", priority: optional{"best_effort", true},
			leaseTTL: optional{"2s", true}, header: optional{"critical", true}, tenant: "acme", source: "10.0.0.7"}},
		{"pipe source", marshal(t, pipe), request{http: true, bulkhead: "auth"}},
		{"empty values", marshal(t, emptyValues), request{http: true, header: optional{"", true}, leaseTTL: optional{"", true}}},
		// A message given twice is merged; a map key given twice keeps its last value.
		{"merged", append(marshal(t, full), marshal(t, extOnly)...), request{http: true, bulkhead: "orders", priority: optional{"", true},
			leaseTTL: optional{"2s", true}, header: optional{"critical", true}, tenant: "acme", source: "10.0.0.7"}},
		// A oneof keeps its last member: a pipe after the socket address clears it...
		{"socket then pipe", append(marshal(t, full), marshal(t, pipe)...), request{http: true, bulkhead: "auth", priority: optional{"best_effort", true},
			leaseTTL: optional{"2s", true}, header: optional{"critical", true}, tenant: "acme"}},
		// ...and a socket address after a pipe starts afresh.
		{"pipe then socket", append(marshal(t, pipe), marshal(t, socketOnly)...), request{http: true, bulkhead: "auth", source: "192.0.2.1"}},
		// A network Check: no HTTP request, a destination port and labels.
		{"network", marshal(t, network), request{port: 5432, label: optional{"critical", true}, source: "10.0.0.7"}},
		{"network then pipe", append(marshal(t, network), marshal(t, netPipe)...), request{label: optional{"critical", true}, source: "10.0.0.7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sameAsDecoded(t, pol, tt.b)
			got := newRequest(pol)
			if err := got.UnmarshalWire(tt.b); err != nil {
				t.Fatal(err)
			}
			got.priorityHeader, got.tenantHeader, got.sourceIsSocket = "", "", false
			if *got != tt.want {
				t.Fatalf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func TestRequestFromWireRefusesMalformed(t *testing.T) {
	good := marshal(t, checkRequest("10.0.0.7", map[string]string{"x-tenant": "acme"}, map[string]string{"bulkhead": "catalog"}))
	for name, b := range map[string][]byte{
		"truncated":         good[:len(good)-3],
		"length past end":   protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.BytesType), 200),
		"field zero":        {0x02, 0x00},
		"stray end group":   protowire.AppendTag(nil, 9, protowire.EndGroupType),
		"bad nested length": append(protowire.AppendTag(nil, 1, protowire.BytesType), 2, 0x52, 9),
	} {
		t.Run(name, func(t *testing.T) {
			if err := newRequest(wirePolicy()).UnmarshalWire(b); err == nil {
				t.Fatalf("accepted % x", b)
			}
			var req authv3.CheckRequest
			if proto.Unmarshal(b, &req) == nil {
				t.Fatalf("proto.Unmarshal accepts % x: the case is not malformed", b)
			}
		})
	}
}

// A header value that is not UTF-8 fails a full decode, and with it the
// Check; read from the wire the Check goes on (the value is not used
// unless it is the priority or tenant header, which are validated).
func TestRequestFromWireToleratesInvalidUTF8(t *testing.T) {
	req := checkRequest("", map[string]string{"referer": "\xff\xfe", "x-tenant": "acme"}, map[string]string{"bulkhead": "catalog"})
	b, err := proto.MarshalOptions{}.Marshal(req)
	if err == nil {
		if proto.Unmarshal(b, new(authv3.CheckRequest)) == nil {
			t.Fatal("proto.Unmarshal accepted invalid UTF-8: the test proves nothing")
		}
	} else {
		t.Skipf("cannot encode the case: %v", err)
	}
	got := newRequest(wirePolicy())
	if err := got.UnmarshalWire(b); err != nil {
		t.Fatal(err)
	}
	if got.bulkhead != "catalog" || got.tenant != "acme" {
		t.Fatalf("got %+v", *got)
	}
}

func TestEncodeAdmitted(t *testing.T) {
	for _, tc := range []struct{ token, key string }{
		{"AAAAAAAAAAAAAAAAAAAAAA", "catalog"},
		{"", ""},
		{string(bytes.Repeat([]byte("t"), 300)), string(bytes.Repeat([]byte("k"), 200))}, // multi-byte lengths
	} {
		var got authv3.CheckResponse
		if err := proto.Unmarshal(encodeAdmitted(tc.token, tc.key), &got); err != nil {
			t.Fatal(err)
		}
		if want := admitted(tc.token, tc.key); !proto.Equal(&got, want) {
			t.Fatalf("encodeAdmitted(%q, %q) decodes to %v, want %v", tc.token, tc.key, &got, want)
		}
	}
}

// FuzzRequestWire: reading a CheckRequest from the wire never panics and,
// for anything a full decode accepts, reads what requestOf reads of the
// decoded message; also for a and b concatenated (a merge).
func FuzzRequestWire(f *testing.F) {
	full := checkRequest("10.0.0.7", map[string]string{"x-bulkhead-priority": "critical", "x-tenant": "acme"},
		map[string]string{"bulkhead": "catalog", "priority": "best_effort", "lease_ttl": "2s"})
	pipe := checkRequest("", nil, map[string]string{"bulkhead": "auth"})
	pipe.Attributes.Source = &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: "/p"}}}}
	f.Add(marshal(f, full), marshal(f, pipe))
	f.Add(marshal(f, pipe), marshal(f, checkRequest("::1", nil, nil)))
	f.Add([]byte{}, []byte{0x0a, 0x00})
	f.Add(marshal(f, networkCheck("10.0.0.7", 5432, map[string]string{permit.LabelPriority: "critical"})), marshal(f, full))
	f.Add(marshal(f, full), marshal(f, networkCheck("::1", 6379, nil)))
	f.Add(marshal(f, checkRequest("", map[string]string{"x-bulkhead-priority": ""}, map[string]string{"priority": ""})), []byte{})
	pol := wirePolicy()
	f.Fuzz(func(t *testing.T, a, b []byte) {
		sameAsDecoded(t, pol, a)
		sameAsDecoded(t, pol, append(append([]byte(nil), a...), b...))
	})
}
