package authz

import (
	"encoding/json"
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/wire"
)

// Headers of a rejection.
const (
	HeaderReason   = "x-bulkhead-reason"
	HeaderBulkhead = "x-bulkhead"
)

// maxEchoedKey bounds how much of an unknown key a rejection echoes back.
const maxEchoedKey = 64

func admitted(token, key string) *authv3.CheckResponse {
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}},
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			permit.MetadataToken:    structpb.NewStringValue(token),
			permit.MetadataBulkhead: structpb.NewStringValue(key),
		}},
	}
}

// allowed is OK without a permit (the unmatched policy "allow").
func allowed() *authv3.CheckResponse {
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}},
	}
}

type rejectionBody struct {
	Error    string `json:"error"`
	Bulkhead string `json:"bulkhead"`
	Reason   string `json:"reason"`
}

// denied is a rejection: Envoy answers the client with it directly. The
// gRPC-level code is PERMISSION_DENIED, which Envoy treats as a denial (any
// non-OK code is) and reports as ext_authz "denied" in its stats. Its
// retry-after is the policy's.
func denied(pol *Policy, key string, r bulkhead.Reason) *authv3.CheckResponse {
	return deniedAfter(pol, key, r, pol.retryAfterSeconds())
}

// deniedAfter is denied with retry-after set to retryAfter.
func deniedAfter(pol *Policy, key string, r bulkhead.Reason, retryAfter string) *authv3.CheckResponse {
	key = echoable(key)
	body, _ := json.Marshal(rejectionBody{Error: "bulkhead rejected", Bulkhead: key, Reason: r.String()})
	headers := []*corev3.HeaderValueOption{
		header("retry-after", retryAfter),
		header(HeaderReason, r.String()),
		header("content-type", "application/json"),
	}
	if key != "" {
		headers = append(headers, header(HeaderBulkhead, key))
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied), Message: "bulkhead " + r.String()},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(pol.DenyStatus)},
			Headers: headers,
			Body:    string(body) + "\n",
		}},
	}
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// echoable returns key if it is short and made of name characters (it is
// echoed in a header and a body), else "".
func echoable(key string) string {
	if len(key) > maxEchoedKey {
		return ""
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || 'A' <= c && c <= 'Z') {
			return ""
		}
	}
	return key
}

// answer is what a Check answers: a granted permit's token and bulkhead,
// or, when no permit was granted, resp.
type answer struct {
	token, key string
	resp       *authv3.CheckResponse
}

func respond(resp *authv3.CheckResponse) answer { return answer{resp: resp} }

// message is the answer as a CheckResponse.
func (a answer) message() *authv3.CheckResponse {
	if a.resp != nil {
		return a.resp
	}
	return admitted(a.token, a.key)
}

// encoded is the answer as the wire codec sends it: an admission encoded
// directly, anything else as its CheckResponse.
func (a answer) encoded() any {
	if a.resp != nil {
		return a.resp
	}
	return encodeAdmitted(a.token, a.key)
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

func (p *Policy) retryAfterSeconds() string { return retryAfterValue(p.RetryAfter) }

// retryAfterValue is d as a retry-after header value: whole seconds,
// rounded up, at least 1.
func retryAfterValue(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return fmt.Sprint(max(s, 1))
}
