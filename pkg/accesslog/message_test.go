package accesslog

import (
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// sameAsDecoded checks that reading b from the wire gives what decoding it
// whole and reading the message gives, when b decodes at all.
func sameAsDecoded(t *testing.T, b []byte) {
	t.Helper()
	var read message
	wireErr := read.UnmarshalWire(b)
	var msg alsv3.StreamAccessLogsMessage
	if err := proto.Unmarshal(b, &msg); err != nil {
		return // a full decode refuses more (invalid UTF-8 anywhere): the wire read may go on
	}
	if wireErr != nil {
		t.Fatalf("UnmarshalWire refused what proto.Unmarshal reads: %v", wireErr)
	}
	var decoded message
	messageOf(&msg, &decoded)
	if read.identified != decoded.identified || read.node != decoded.node || read.logName != decoded.logName ||
		!slices.EqualFunc(read.entries, decoded.entries, sameEntry) {
		t.Fatalf("wire read differs from the decoded message:\n got %+v\nwant %+v", read, decoded)
	}
}

func metaWith(ns, key string, v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{ns: {Fields: map[string]*structpb.Value{key: v}}}}
}

func tcpLogs(n int) *alsv3.StreamAccessLogsMessage {
	return &alsv3.StreamAccessLogsMessage{LogEntries: &alsv3.StreamAccessLogsMessage_TcpLogs{
		TcpLogs: &alsv3.StreamAccessLogsMessage_TCPAccessLogEntries{LogEntry: make([]*datav3.TCPAccessLogEntry, n)}}}
}

// connMeta is the network ext_authz filter's metadata of a connection's
// permit, as Envoy 1.40 logs it (with the filter's own duration field).
func connMeta(token string) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{permit.MetadataNamespaceNetwork: {Fields: map[string]*structpb.Value{
		permit.MetadataToken: structpb.NewStringValue(token), permit.MetadataBulkhead: structpb.NewStringValue("pg"),
		"ext_authz_duration": structpb.NewNumberValue(6)}}}}
}

// tcpOf is a message with one TCP entry.
func tcpOf(md *corev3.Metadata, typ datav3.AccessLogType, flags *datav3.ResponseFlags) *alsv3.StreamAccessLogsMessage {
	return &alsv3.StreamAccessLogsMessage{LogEntries: &alsv3.StreamAccessLogsMessage_TcpLogs{
		TcpLogs: &alsv3.StreamAccessLogsMessage_TCPAccessLogEntries{LogEntry: []*datav3.TCPAccessLogEntry{{
			CommonProperties: &datav3.AccessLogCommon{Metadata: md, AccessLogType: typ, ResponseFlags: flags}}}}}}
}

func TestMessageFromWire(t *testing.T) {
	const tok = "AAAAAAAAAAAAAAAAAAAAAA"
	end := datav3.AccessLogType_DownstreamEnd
	reset := &datav3.ResponseFlags{UpstreamRemoteReset: true, DownstreamRemoteReset: true}
	cat := func(ms ...proto.Message) []byte {
		var b []byte
		for _, m := range ms {
			b = append(b, marshal(t, m)...)
		}
		return b
	}
	// one HTTP entry whose common properties are given in two halves (merged)
	split := func(first, second *datav3.AccessLogCommon) []byte {
		e1 := marshal(t, &datav3.HTTPAccessLogEntry{CommonProperties: first})
		e2 := marshal(t, &datav3.HTTPAccessLogEntry{CommonProperties: second})
		entries := protowire.AppendBytes(protowire.AppendTag(nil, fieldEntries, protowire.BytesType), append(e1, e2...))
		return protowire.AppendBytes(protowire.AppendTag(nil, fieldMsgHTTPLogs, protowire.BytesType), entries)
	}
	cat7 := []byte("catalog") // the bulkhead tokenMeta and endOf name
	tests := []struct {
		name string
		b    []byte
		want message
	}{
		{"empty", nil, message{}},
		{"identifier and an ended request", cat(httpLogs(ident("n1"), httpEntry(tokenMeta(tok), end, 503, reset))),
			message{identified: true, node: "n1", logName: "bulkhead", entries: []entry{{end: true, token: tok, bulkhead: cat7, code: 503,
				flags: 1<<flagUpstreamRemoteReset | 1<<flagDownstreamRemoteReset}}}},
		{"not the end", cat(httpLogs(nil, httpEntry(tokenMeta(tok), datav3.AccessLogType_DownstreamPeriodic, 0, nil))),
			message{entries: []entry{{periodic: true, token: tok, bulkhead: cat7}}}},
		{"token in another namespace", cat(httpLogs(nil, httpEntry(metaWith("other", permit.MetadataToken, structpb.NewStringValue(tok)), end, 200, nil))),
			message{entries: []entry{{end: true, code: 200}}}},
		{"token not a string", cat(httpLogs(nil, httpEntry(metaWith(permit.MetadataNamespace, permit.MetadataToken, structpb.NewNumberValue(7)), end, 200, nil))),
			message{entries: []entry{{end: true, code: 200}}}},
		// http_logs given twice merge; tcp_logs after them replace them (one oneof).
		{"http twice", cat(httpLogs(nil, endOf("a")), httpLogs(nil, endOf("b"))),
			message{entries: []entry{{end: true, token: "a", bulkhead: cat7, code: 200}, {end: true, token: "b", bulkhead: cat7, code: 200}}}},
		{"http then tcp", cat(httpLogs(nil, endOf("a")), tcpLogs(2)), message{entries: []entry{{conn: true}, {conn: true}}}},
		// A connection's entries: the network filter's namespace and the TCP log types.
		{"tcp end and periodic", cat(tcpOf(connMeta(tok), datav3.AccessLogType_TcpConnectionEnd, nil),
			tcpOf(connMeta("b"), datav3.AccessLogType_TcpPeriodic, &datav3.ResponseFlags{UpstreamConnectionFailure: true})),
			message{entries: []entry{{conn: true, end: true, token: tok, bulkhead: []byte("pg")},
				{conn: true, periodic: true, token: "b", bulkhead: []byte("pg"), flags: 1 << flagUpstreamConnectionFailure}}}},
		{"tcp entry with the http namespace", cat(tcpOf(tokenMeta(tok), datav3.AccessLogType_TcpConnectionEnd, nil)),
			message{entries: []entry{{conn: true, end: true}}}},
		{"http entry with the network namespace", cat(httpLogs(nil, httpEntry(connMeta(tok), end, 200, nil))),
			message{entries: []entry{{end: true, code: 200}}}},
		{"http end type in a tcp entry", cat(tcpOf(connMeta(tok), end, nil)),
			message{entries: []entry{{conn: true, token: tok, bulkhead: []byte("pg")}}}},
		{"tcp then http", cat(tcpLogs(2), httpLogs(ident("n2"), endOf("a"))),
			message{identified: true, node: "n2", logName: "bulkhead", entries: []entry{{end: true, token: "a", bulkhead: cat7, code: 200}}}},
		// Within one entry, given in two halves: the halves merge, but a
		// map entry of the same key replaces the earlier one whole, so the
		// later namespace Struct without the token drops it (and keeps
		// its bulkhead)...
		{"merged common properties", split(
			&datav3.AccessLogCommon{AccessLogType: end, Metadata: tokenMeta(tok), ResponseFlags: reset},
			&datav3.AccessLogCommon{Metadata: metaWith(permit.MetadataNamespace, "bulkhead", structpb.NewStringValue("catalog"))}),
			message{entries: []entry{{end: true, bulkhead: cat7, flags: 1<<flagUpstreamRemoteReset | 1<<flagDownstreamRemoteReset}}}},
		// ...while another namespace leaves it.
		{"other namespace merged", split(
			&datav3.AccessLogCommon{AccessLogType: end, Metadata: tokenMeta(tok)},
			&datav3.AccessLogCommon{Metadata: metaWith("envoy.lb", "canary", structpb.NewBoolValue(true))}),
			message{entries: []entry{{end: true, token: tok, bulkhead: cat7}}}},
		{"token replaced by a number", split(
			&datav3.AccessLogCommon{AccessLogType: end, Metadata: tokenMeta(tok)},
			&datav3.AccessLogCommon{Metadata: metaWith(permit.MetadataNamespace, permit.MetadataToken, structpb.NewBoolValue(true))}),
			message{entries: []entry{{end: true}}}},
		// proto3 does not encode a false bool: the flag stays (see
		// TestMessageFromWireFlagLastWins for an encoded false).
		{"flags merged", split(&datav3.AccessLogCommon{ResponseFlags: reset}, &datav3.AccessLogCommon{
			ResponseFlags: &datav3.ResponseFlags{UpstreamRemoteReset: false, LocalReset: true}}),
			message{entries: []entry{{flags: 1<<flagUpstreamRemoteReset | 1<<flagDownstreamRemoteReset | 1<<flagLocalReset}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sameAsDecoded(t, tt.b)
			var got message
			if err := got.UnmarshalWire(tt.b); err != nil {
				t.Fatal(err)
			}
			if got.identified != tt.want.identified || got.node != tt.want.node || got.logName != tt.want.logName ||
				!slices.EqualFunc(got.entries, tt.want.entries, sameEntry) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A flag encoded true, then false: the last value wins, as in a full decode.
func TestMessageFromWireFlagLastWins(t *testing.T) {
	flagsMsg := protowire.AppendVarint(protowire.AppendTag(nil, flagLocalReset, protowire.VarintType), 1)
	flagsMsg = protowire.AppendVarint(protowire.AppendTag(flagsMsg, flagLocalReset, protowire.VarintType), 0)
	common := protowire.AppendBytes(protowire.AppendTag(nil, fieldCommonFlags, protowire.BytesType), flagsMsg)
	e := protowire.AppendBytes(protowire.AppendTag(nil, fieldEntryCommon, protowire.BytesType), common)
	entries := protowire.AppendBytes(protowire.AppendTag(nil, fieldEntries, protowire.BytesType), e)
	b := protowire.AppendBytes(protowire.AppendTag(nil, fieldMsgHTTPLogs, protowire.BytesType), entries)
	sameAsDecoded(t, b)
	var got message
	if err := got.UnmarshalWire(b); err != nil {
		t.Fatal(err)
	}
	if len(got.entries) != 1 || got.entries[0].flags != 0 {
		t.Fatalf("got %+v, want one entry with no flags", got.entries)
	}
}

// An entry with a field that is not UTF-8 (a path Envoy passed on as it
// came) fails a full decode, and with it every entry of the message; read
// from the wire, its permit is released.
func TestMessageFromWireToleratesInvalidUTF8(t *testing.T) {
	const tok = "AAAAAAAAAAAAAAAAAAAAAA"
	e := endOf(tok)
	e.Request = &datav3.HTTPRequestProperties{Path: "/caf\xe9"}
	b, err := proto.Marshal(httpLogs(nil, e))
	if err != nil {
		t.Skipf("cannot encode the case: %v", err)
	}
	if proto.Unmarshal(b, new(alsv3.StreamAccessLogsMessage)) == nil {
		t.Fatal("proto.Unmarshal accepted invalid UTF-8: the test proves nothing")
	}
	var got message
	if err := got.UnmarshalWire(b); err != nil {
		t.Fatal(err)
	}
	if len(got.entries) != 1 || got.entries[0].token != tok || !got.entries[0].end {
		t.Fatalf("got %+v", got.entries)
	}
}

func TestMessageFromWireRefusesMalformed(t *testing.T) {
	good := marshal(t, httpLogs(ident("n1"), endOf("AAAAAAAAAAAAAAAAAAAAAA")))
	for name, b := range map[string][]byte{
		"truncated":       good[:len(good)-3],
		"length past end": protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.BytesType), 200),
		"field zero":      {0x02, 0x00},
		"stray end group": protowire.AppendTag(nil, 9, protowire.EndGroupType),
	} {
		t.Run(name, func(t *testing.T) {
			var m message
			if err := m.UnmarshalWire(b); err == nil {
				t.Fatalf("accepted % x", b)
			}
			if proto.Unmarshal(b, new(alsv3.StreamAccessLogsMessage)) == nil {
				t.Fatalf("proto.Unmarshal accepts % x: the case is not malformed", b)
			}
		})
	}
}

// FuzzMessageWire: reading a StreamAccessLogsMessage from the wire never
// panics and, for anything a full decode accepts, reads what messageOf
// reads of the decoded message; also for a and b concatenated (a merge).
func FuzzMessageWire(f *testing.F) {
	const tok = "AAAAAAAAAAAAAAAAAAAAAA"
	f.Add(marshal(f, httpLogs(ident("n1"), endOf(tok))), marshal(f, httpLogs(nil, endOf("b"))))
	f.Add(marshal(f, httpLogs(nil, httpEntry(metaWith(permit.MetadataNamespace, permit.MetadataToken, structpb.NewListValue(&structpb.ListValue{})),
		datav3.AccessLogType_DownstreamEnd, 0, &datav3.ResponseFlags{DownstreamConnectionTermination: true}))),
		marshal(f, tcpLogs(1)))
	f.Add(marshal(f, tcpLogs(3)), []byte{})
	f.Add(marshal(f, tcpOf(connMeta(tok), datav3.AccessLogType_TcpPeriodic, nil)),
		marshal(f, tcpOf(connMeta("b"), datav3.AccessLogType_TcpConnectionEnd, &datav3.ResponseFlags{UpstreamConnectionFailure: true})))
	timed := endOf(tok)
	timed.CommonProperties.TimeToFirstUpstreamTxByte = durationpb.New(1500 * time.Microsecond)
	timed.CommonProperties.TimeToLastUpstreamRxByte = durationpb.New(2*time.Second + 7*time.Millisecond)
	f.Add(marshal(f, httpLogs(nil, timed)), marshal(f, httpLogs(nil, endOf("b"))))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		sameAsDecoded(t, a)
		sameAsDecoded(t, append(append([]byte(nil), a...), b...))
	})
}

// The release lag is the hold time less the upstream's own time, from the
// entry's timings; entries without both timings record none.
func TestReleaseLag(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_790_000_000, 0))
	reg := bulkhead.NewRegistry()
	if _, err := reg.Apply(map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 10}}); err != nil {
		t.Fatal(err)
	}
	ledger := permit.NewMemory(clk)
	rec := newFakeRecorder()
	s := New(admission.NewMemory(reg, ledger, permit.Heartbeat{}, admission.WithClock(clk)), rec, nil, WithClock(clk))
	ms := func(v int) *durationpb.Duration { return durationpb.New(time.Duration(v) * time.Millisecond) }
	for _, tc := range []struct {
		name        string
		first, last *durationpb.Duration
		want        []time.Duration
	}{
		{"upstream 20 of 30 ms held", ms(1), ms(21), []time.Duration{10 * time.Millisecond}},
		{"no upstream request", nil, nil, nil},
		{"no response from upstream", ms(1), nil, nil},
		{"upstream longer than the hold (clamped)", ms(0), ms(45), []time.Duration{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec.lags = nil
			p, err := reg.Get("catalog").TryAcquire(bulkhead.Normal)
			if err != nil {
				t.Fatal(err)
			}
			token, err := ledger.Grant(p, permit.Grant{Bulkhead: "catalog", TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			clk.Advance(30 * time.Millisecond)
			e := endOf(token)
			e.CommonProperties.TimeToFirstUpstreamTxByte, e.CommonProperties.TimeToLastUpstreamRxByte = tc.first, tc.last
			s.entry(&stream{}, viewOf(t, e))
			if !slices.Equal(rec.lags, tc.want) {
				t.Fatalf("lags %v, want %v", rec.lags, tc.want)
			}
		})
	}
}
