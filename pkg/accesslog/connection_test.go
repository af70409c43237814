package accesslog

import (
	"testing"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// tcpEntryOf is a connection's entry carrying token in the network ext_authz
// filter's namespace, for the bulkhead catalog.
func tcpEntryOf(token string, typ datav3.AccessLogType, flags *datav3.ResponseFlags) *datav3.TCPAccessLogEntry {
	md := connMeta(token)
	md.FilterMetadata[permit.MetadataNamespaceNetwork].Fields[permit.MetadataBulkhead] = structString("catalog")
	return &datav3.TCPAccessLogEntry{CommonProperties: &datav3.AccessLogCommon{Metadata: md, AccessLogType: typ, ResponseFlags: flags}}
}

func tcpMsg(id *alsv3.StreamAccessLogsMessage_Identifier, entries ...*datav3.TCPAccessLogEntry) *alsv3.StreamAccessLogsMessage {
	return &alsv3.StreamAccessLogsMessage{Identifier: id, LogEntries: &alsv3.StreamAccessLogsMessage_TcpLogs{
		TcpLogs: &alsv3.StreamAccessLogsMessage_TCPAccessLogEntries{LogEntry: entries}}}
}

// A connection's end entry releases its permit once; entries of other
// types, or with the HTTP filter's namespace, do not.
func TestConnectionEndReleases(t *testing.T) {
	e := newEnv(t)
	token := e.grant(t)
	httpNS := &datav3.TCPAccessLogEntry{CommonProperties: &datav3.AccessLogCommon{Metadata: tokenMeta(token),
		AccessLogType: datav3.AccessLogType_TcpConnectionEnd}}
	e.send(t, tcpMsg(ident("n1"), httpNS, tcpEntryOf(token, datav3.AccessLogType_DownstreamEnd, nil),
		tcpEntryOf(token, datav3.AccessLogType_TcpUpstreamConnected, nil)))
	if e.ledger.Len() != 1 || e.rec.entryCount("no_token") != 1 || e.rec.entryCount("not_end") != 2 {
		t.Fatalf("%d leases, entries %v; want the permit held, no_token 1, not_end 2", e.ledger.Len(), e.rec.entries)
	}
	e.send(t, tcpMsg(ident("n1"), tcpEntryOf(token, datav3.AccessLogType_TcpConnectionEnd, nil)),
		tcpMsg(nil, tcpEntryOf(token, datav3.AccessLogType_TcpConnectionEnd, nil)))
	if e.ledger.Len() != 0 || e.inUse() != 0 || e.rec.entryCount("released") != 1 || e.rec.entryCount("duplicate") != 1 {
		t.Fatalf("%d leases, %d in use, entries %v; want released 1, duplicate 1", e.ledger.Len(), e.inUse(), e.rec.entries)
	}
	if got := e.rec.outcomeCount("catalog", bulkhead.Success); got != 1 {
		t.Fatalf("success outcomes = %v, want 1 (a client closing its connection is its normal end)", e.rec.outcomes)
	}
}

func TestConnectionOutcome(t *testing.T) {
	for _, tt := range []struct {
		flags *datav3.ResponseFlags
		want  bulkhead.Outcome
	}{
		{nil, bulkhead.Success},
		{&datav3.ResponseFlags{DownstreamConnectionTermination: true}, bulkhead.Success},
		{&datav3.ResponseFlags{UpstreamConnectionFailure: true}, bulkhead.Failure},
		{&datav3.ResponseFlags{UpstreamConnectionTermination: true}, bulkhead.Failure},
	} {
		var m message
		if err := m.UnmarshalWire(marshal(t, tcpMsg(nil, tcpEntryOf("t", datav3.AccessLogType_TcpConnectionEnd, tt.flags)))); err != nil {
			t.Fatal(err)
		}
		if got := outcome(&m.entries[0]); got != tt.want {
			t.Errorf("flags %v: outcome %v, want %v", tt.flags, got, tt.want)
		}
	}
}

// A connection's periodic entries renew its lease as a request's do, and
// adopt it when the ledger does not hold it.
func TestConnectionHeartbeat(t *testing.T) {
	e := newHBEnv(t, hb)
	st := &stream{node: "envoy-1"}
	entry := func(token string, typ datav3.AccessLogType) *entry {
		var m message
		if err := m.UnmarshalWire(marshal(t, tcpMsg(nil, tcpEntryOf(token, typ, nil)))); err != nil {
			t.Fatal(err)
		}
		return &m.entries[0]
	}
	tok := e.grant(t, hb.TTL, "envoy-1")
	for range 10 { // ten intervals, over three TTLs
		e.clk.Advance(hb.Interval)
		e.srv.entry(st, entry(tok, datav3.AccessLogType_TcpPeriodic))
	}
	if e.inUse() != 1 || e.rec.entryCount("renewed") != 10 {
		t.Fatalf("in use %d, entries %v; want the connection's permit renewed 10 times", e.inUse(), e.rec.entries)
	}
	e.srv.entry(st, entry(tok, datav3.AccessLogType_TcpConnectionEnd))
	if e.inUse() != 0 || e.rec.entryCount("released") != 1 {
		t.Fatalf("in use %d, entries %v after the end entry", e.inUse(), e.rec.entries)
	}
	// A running connection a new process never granted (a restart): adopted.
	const unknown = "AAAAAAAAAAAAAAAAAAAAAA"
	e, st = newHBEnv(t, hb), &stream{node: "envoy-1"} // a stream is its server's
	e.srv.entry(st, entry(unknown, datav3.AccessLogType_TcpPeriodic))
	if e.inUse() != 1 || e.rec.entryCount("adopted") != 1 {
		t.Fatalf("in use %d, entries %v; want the running connection adopted", e.inUse(), e.rec.entries)
	}
}
