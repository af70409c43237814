// Package wire lets the daemon read Envoy's gRPC messages straight from
// their protobuf encoding, taking only the fields it uses.
//
// A CheckRequest carries every request header and an access-log entry
// carries some thirty fields, nested structs and a metadata map; decoding
// them whole costs more than everything else the daemon does per request
// (about 10 us and 70 allocations for one access-log entry). The handlers
// of package authz and accesslog walk the encoding with a Reader instead
// and keep the few values they need, with the semantics of a full decode:
// the last value of a field wins, a message given twice is merged, a oneof
// keeps its last member, and a field of an unexpected wire type is skipped
// as unknown.
//
// ServerCodec is the gRPC codec that hands a message to such a decoder (any
// type implementing Unmarshaler) and sends pre-encoded answers (Encoded)
// as they are. It decodes an LRS LoadStatsRequest without its node's body
// (UnmarshalLoadStats: Envoy sends its whole node, about 61 KB, in every
// load report; the daemon reads its id). Every other message goes through
// the standard protobuf codec. A server registering those handlers must be
// built with it.
//
// Reader and the codec are safe for concurrent use in the usual sense: a
// Reader belongs to one goroutine, the codec to any number.
package wire
