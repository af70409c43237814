package meshsim

import (
	"testing"
	"time"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/protobuf/proto"
)

// A stream's first message built from identifierField and the entries'
// encoding decodes to the message proto.Marshal would have sent: the
// captured node with the Envoy's id and cluster, the logger's name, the
// entries.
func TestIdentifierField(t *testing.T) {
	tm, err := loadTemplates()
	if err != nil {
		t.Fatal(err)
	}
	r := &request{id: 7, bulkhead: "catalog", start: time.Now(), token: "tok"}
	entries := &alsv3.StreamAccessLogsMessage{LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{
		HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: []*datav3.HTTPAccessLogEntry{
			tm.endEntry(r, time.Now()), tm.periodicEntry(r, time.Now())}}}}
	body, err := proto.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ node, name string }{{"envoy-0042-w1", tm.release}, {"e", tm.heartbeat}, {string(make([]byte, 300)), "x"}} {
		var got alsv3.StreamAccessLogsMessage
		if err := proto.Unmarshal(append(tm.identifierField(tc.node, tc.name), body...), &got); err != nil {
			t.Fatalf("%q: %v", tc.node, err)
		}
		want := proto.Clone(entries).(*alsv3.StreamAccessLogsMessage)
		want.Identifier = tm.identifier(tc.node, tc.name)
		if !proto.Equal(&got, want) {
			t.Errorf("%q %q: the built first message decodes to another message than the marshalled one", tc.node, tc.name)
		}
		if got.GetIdentifier().GetNode().GetId() != tc.node || len(got.GetIdentifier().GetNode().GetExtensions()) == 0 {
			t.Errorf("%q: node id %q, %d extensions", tc.node, got.GetIdentifier().GetNode().GetId(), len(got.GetIdentifier().GetNode().GetExtensions()))
		}
	}
}

// BenchmarkIdentifier: a stream's identifier marshalled (what the
// simulator did for every stream it opened) against built from the
// captured node's encoding (identifierField).
//
//	go test -run '^$' -bench Identifier -count 6 ./e2e/meshsim/
func BenchmarkIdentifier(b *testing.B) {
	tm, err := loadTemplates()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("how=marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := proto.Marshal(&alsv3.StreamAccessLogsMessage{Identifier: tm.identifier("envoy-0042-w1", tm.release)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("how=built", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = tm.identifierField("envoy-0042-w1", tm.release)
		}
	})
}
