package wire

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// Reader walks the fields of one encoded message, in order. Its zero value
// reads nothing; start it with NewReader:
//
//	r := wire.NewReader(b)
//	for r.Next() {
//		switch {
//		case r.Is(1, protowire.BytesType): ... r.Bytes() ...
//		}
//	}
//	if err := r.Err(); err != nil { ... }
//
// A malformed encoding (a bad tag, a length past the end, a stray end of
// group) stops the walk with an error, as it fails a full decode.
type Reader struct {
	b      []byte
	num    protowire.Number
	typ    protowire.Type
	bytes  []byte
	varint uint64
	err    error
}

// NewReader returns a Reader of the message encoded in b; it keeps b.
func NewReader(b []byte) Reader { return Reader{b: b} }

// Next moves to the next field and reports whether there is one.
func (r *Reader) Next() bool {
	if r.err != nil || len(r.b) == 0 {
		return false
	}
	num, typ, n := protowire.ConsumeTag(r.b)
	if n < 0 {
		r.err = protowire.ParseError(n)
		return false
	}
	r.b = r.b[n:]
	r.bytes, r.varint = nil, 0
	switch typ {
	case protowire.BytesType:
		r.bytes, n = protowire.ConsumeBytes(r.b)
	case protowire.VarintType:
		r.varint, n = protowire.ConsumeVarint(r.b)
	case protowire.Fixed32Type:
		var v uint32
		v, n = protowire.ConsumeFixed32(r.b)
		r.varint = uint64(v)
	case protowire.Fixed64Type:
		r.varint, n = protowire.ConsumeFixed64(r.b)
	default: // groups (skipped whole) and invalid types
		n = protowire.ConsumeFieldValue(num, typ, r.b)
	}
	if n < 0 {
		r.err = protowire.ParseError(n)
		return false
	}
	r.b = r.b[n:]
	r.num, r.typ = num, typ
	return true
}

// Is reports whether the current field is number num of wire type typ. A
// known field of another wire type is, as in a full decode, an unknown
// field: skip it.
func (r *Reader) Is(num protowire.Number, typ protowire.Type) bool {
	return r.num == num && r.typ == typ
}

// Field is the current field's number and wire type.
func (r *Reader) Field() (protowire.Number, protowire.Type) { return r.num, r.typ }

// Bytes is the payload of the current length-delimited field (a string, a
// bytes field or an embedded message). It aliases the encoding.
func (r *Reader) Bytes() []byte { return r.bytes }

// Varint is the value of the current varint or fixed-width field.
func (r *Reader) Varint() uint64 { return r.varint }

// Bool is the current varint field read as a bool.
func (r *Reader) Bool() bool { return r.varint != 0 }

// Err is the error that stopped the walk, or nil at the end of a
// well-formed message.
func (r *Reader) Err() error { return r.err }

// The field numbers of a map entry (a map is a repeated message of these).
const (
	MapKey   protowire.Number = 1
	MapValue protowire.Number = 2
)

// MapEntry reads one entry of a map with string keys: its key and its
// value field's payload, the last of each when repeated ("" or nil when
// missing). That is the value of a map<string, string>; a message value
// given more than once merges, so read every MapValue of b instead. key
// and value alias b.
func MapEntry(b []byte) (key, value []byte, err error) {
	rd := NewReader(b)
	for rd.Next() {
		switch {
		case rd.Is(MapKey, protowire.BytesType):
			key = rd.Bytes()
		case rd.Is(MapValue, protowire.BytesType):
			value = rd.Bytes()
		}
	}
	return key, value, rd.Err()
}
