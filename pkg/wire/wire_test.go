package wire

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// raw keeps what it is given.
type raw struct{ b []byte }

func (r *raw) UnmarshalWire(b []byte) error { r.b = bytes.Clone(b); return nil }

func testCodec() codec { return codec{proto: encoding.GetCodecV2(protocodec.Name)} }

func TestCodecUnmarshaler(t *testing.T) {
	c := testCodec()
	for _, parts := range [][]string{{"abc"}, {"ab", "c"}, {"a", "", "bc"}} {
		var data mem.BufferSlice
		for _, p := range parts {
			data = append(data, mem.SliceBuffer(p))
		}
		var r raw
		if err := c.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		if string(r.b) != "abc" {
			t.Fatalf("%q: got %q", parts, r.b)
		}
	}
}

func TestCodecEncodedAndProto(t *testing.T) {
	c := testCodec()
	out, err := c.Marshal(Encoded("\x08\x07"))
	if err != nil || string(out.Materialize()) != "\x08\x07" {
		t.Fatalf("Encoded: %q, %v", out.Materialize(), err)
	}
	// Everything else is protobuf as usual.
	out, err = c.Marshal(wrapperspb.UInt32(7))
	if err != nil {
		t.Fatal(err)
	}
	var v wrapperspb.UInt32Value
	if err := c.Unmarshal(out, &v); err != nil || v.GetValue() != 7 {
		t.Fatalf("proto round trip: %v, %v", &v, err)
	}
	if c.Name() != protocodec.Name {
		t.Fatalf("Name = %q", c.Name())
	}
}

func TestReader(t *testing.T) {
	b := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 300)
	b = protowire.AppendString(protowire.AppendTag(b, 2, protowire.BytesType), "hi")
	b = protowire.AppendFixed32(protowire.AppendTag(b, 3, protowire.Fixed32Type), 5)
	b = protowire.AppendFixed64(protowire.AppendTag(b, 4, protowire.Fixed64Type), 6)
	group := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1)
	b = protowire.AppendTag(append(protowire.AppendTag(b, 5, protowire.StartGroupType), group...), 5, protowire.EndGroupType)
	b = protowire.AppendVarint(protowire.AppendTag(b, 6, protowire.VarintType), 0)
	type field struct {
		num    protowire.Number
		typ    protowire.Type
		bytes  string
		varint uint64
	}
	var got []field
	r := NewReader(b)
	for r.Next() {
		got = append(got, field{r.num, r.typ, string(r.Bytes()), r.Varint()})
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	want := []field{{1, protowire.VarintType, "", 300}, {2, protowire.BytesType, "hi", 0}, {3, protowire.Fixed32Type, "", 5},
		{4, protowire.Fixed64Type, "", 6}, {5, protowire.StartGroupType, "", 0}, {6, protowire.VarintType, "", 0}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("field %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	// A message the reader stops on, as proto.Unmarshal refuses it.
	for _, bad := range [][]byte{b[:len(b)-1], {0x00}, protowire.AppendTag(nil, 7, protowire.EndGroupType), {0x0a, 0x05, 'a'}} {
		r := NewReader(bad)
		for r.Next() {
		}
		if r.Err() == nil {
			t.Errorf("% x: no error", bad)
		}
		if proto.Unmarshal(bad, new(wrapperspb.StringValue)) == nil {
			t.Errorf("% x: proto.Unmarshal accepts it", bad)
		}
	}
}

func TestMapEntry(t *testing.T) {
	entry := func(fields ...[2]string) []byte {
		var b []byte
		for _, f := range fields {
			num := MapKey
			if f[0] == "v" {
				num = MapValue
			}
			b = protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), f[1])
		}
		return b
	}
	for _, tc := range []struct {
		name       string
		b          []byte
		key, value string
	}{
		{"key and value", entry([2]string{"k", "a"}, [2]string{"v", "1"}), "a", "1"},
		{"value first", entry([2]string{"v", "1"}, [2]string{"k", "a"}), "a", "1"},
		{"repeated: the last wins", entry([2]string{"k", "a"}, [2]string{"v", "1"}, [2]string{"k", "b"}, [2]string{"v", "2"}), "b", "2"},
		{"empty", nil, "", ""},
	} {
		k, v, err := MapEntry(tc.b)
		if err != nil || string(k) != tc.key || string(v) != tc.value {
			t.Errorf("%s: got %q, %q, %v; want %q, %q", tc.name, k, v, err, tc.key, tc.value)
		}
	}
	if _, _, err := MapEntry([]byte{0x0a, 0x05, 'a'}); err == nil {
		t.Error("a truncated entry: no error")
	}
	r := NewReader(entry([2]string{"v", "x"}))
	if !r.Next() {
		t.Fatal(r.Err())
	}
	if n, typ := r.Field(); n != MapValue || typ != protowire.BytesType {
		t.Errorf("Field() = %d, %d", n, typ)
	}
}
