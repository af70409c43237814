package wire

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	loadstats "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// envoyNode is a node like Envoy 1.40's: 516 extensions, about 61 KB.
func envoyNode(id string) *corev3.Node {
	n := &corev3.Node{Id: id, Cluster: "front", UserAgentName: "envoy",
		UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{}},
		Locality:             &corev3.Locality{Zone: "z1"}}
	for i := range 516 {
		n.Extensions = append(n.Extensions, &corev3.Extension{
			Name:     fmt.Sprintf("envoy.filters.http.some_extension_%03d", i),
			Category: "envoy.filters.http", TypeUrls: []string{fmt.Sprintf("envoy.extensions.filters.http.some_extension_%03d.v3.Config", i)},
		})
	}
	return n
}

func loadReport(node *corev3.Node) *loadstats.LoadStatsRequest {
	return &loadstats.LoadStatsRequest{Node: node, ClusterStats: []*endpointv3.ClusterStats{{
		ClusterName: "orders_shares",
		UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{
			Locality: &corev3.Locality{Zone: "z1"}, TotalRequestsInProgress: 3, TotalIssuedRequests: 5, TotalSuccessfulRequests: 2,
		}},
		TotalDroppedRequests: 7, LoadReportInterval: durationpb.New(998e6),
	}}}
}

// reduced is what UnmarshalLoadStats makes of the full decode of b: its
// node reduced to its id. ok is false when the full decode fails.
func reduced(b []byte) (*loadstats.LoadStatsRequest, bool) {
	var full loadstats.LoadStatsRequest
	if proto.Unmarshal(b, &full) != nil {
		return nil, false
	}
	if full.Node != nil {
		full.Node = &corev3.Node{Id: full.Node.GetId()}
	}
	return &full, true
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestUnmarshalLoadStats(t *testing.T) {
	report := mustMarshal(t, loadReport(envoyNode("envoy-1")))
	stats := mustMarshal(t, &loadstats.LoadStatsRequest{ClusterStats: loadReport(nil).ClusterStats})
	node := func(id string) []byte {
		return mustMarshal(t, &loadstats.LoadStatsRequest{Node: &corev3.Node{Id: id, Cluster: "c"}})
	}
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"Envoy's report: the node first", report},
		{"the first request: a node alone", node("envoy-1")},
		{"no node", stats},
		{"empty", nil},
		{"the node last", cat(stats, node("envoy-2"))},
		{"the node between two cluster stats: they are kept in order", cat(stats, node("envoy-3"), stats)},
		{"two nodes merge: the last id", cat(node("first"), stats, node("second"))},
		{"a second node without an id keeps the first id", cat(node("first"), mustMarshal(t, &loadstats.LoadStatsRequest{Node: &corev3.Node{Cluster: "x"}}))},
		{"a node field of another wire type is unknown", cat(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5), stats)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, ok := reduced(tt.b)
			if !ok {
				t.Fatal("the full decode fails")
			}
			got := &loadstats.LoadStatsRequest{Node: &corev3.Node{Id: "stale"}} // reset first
			if err := UnmarshalLoadStats(tt.b, got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("got %v\nwant %v", got, want)
			}
		})
	}
}

func TestUnmarshalLoadStatsErrors(t *testing.T) {
	badID := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType),
		protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff, 0xfe}))
	for name, b := range map[string][]byte{
		"a node id of invalid UTF-8":   badID,
		"a length past the end":        {0x0a, 0x10, 0x01},
		"a node body past its end":     {0x0a, 0x02, 0x0a, 0x05},
		"a cluster stats of bad bytes": {0x12, 0x02, 0xff, 0xff},
	} {
		if err := UnmarshalLoadStats(b, &loadstats.LoadStatsRequest{}); err == nil {
			t.Errorf("%s: no error", name)
		}
		if _, ok := reduced(b); ok {
			t.Errorf("%s: the full decode takes it", name)
		}
	}
}

// TestCodecLoadStats: the server codec decodes a LoadStatsRequest with
// UnmarshalLoadStats, whole or in pieces.
func TestCodecLoadStats(t *testing.T) {
	b := mustMarshal(t, loadReport(envoyNode("envoy-1")))
	want, _ := reduced(b)
	for _, cut := range []int{len(b), 10, len(b) - 3} {
		data := mem.BufferSlice{mem.SliceBuffer(b[:cut])}
		if cut < len(b) {
			data = append(data, mem.SliceBuffer(b[cut:]))
		}
		var got loadstats.LoadStatsRequest
		if err := testCodec().Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("cut at %d: got %v", cut, &got)
		}
	}
}

// FuzzLoadStats: whatever the full decode takes, UnmarshalLoadStats
// takes, and the two agree but for the node's fields other than its id.
func FuzzLoadStats(f *testing.F) {
	f.Add(mustMarshal(f, loadReport(&corev3.Node{Id: "n", Cluster: "c", Extensions: []*corev3.Extension{{Name: "e"}}})))
	f.Add(mustMarshal(f, &loadstats.LoadStatsRequest{Node: &corev3.Node{Id: "n"}}))
	f.Add([]byte{0x0a, 0x03, 0x0a, 0x01, 'a', 0x12, 0x00, 0x0a, 0x03, 0x0a, 0x01, 'b'})
	f.Fuzz(func(t *testing.T, b []byte) {
		want, ok := reduced(b)
		if !ok {
			return
		}
		var got loadstats.LoadStatsRequest
		if err := UnmarshalLoadStats(b, &got); err != nil {
			t.Fatalf("the full decode takes %x, UnmarshalLoadStats fails: %v", b, err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("%x: got %v, want %v", b, &got, want)
		}
	})
}

// BenchmarkLoadStats: a load report with Envoy's whole node, decoded whole
// (the standard codec) and without the node's body.
func BenchmarkLoadStats(b *testing.B) {
	enc := mustMarshal(b, loadReport(envoyNode("envoy-1")))
	b.Run(fmt.Sprintf("proto.Unmarshal/%dB", len(enc)), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m loadstats.LoadStatsRequest
			if err := proto.Unmarshal(enc, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("UnmarshalLoadStats/%dB", len(enc)), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m loadstats.LoadStatsRequest
			if err := UnmarshalLoadStats(enc, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
