package server

import (
	"context"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// Hostile input on the access-log stream: what a client that can reach the
// gRPC listener (without mTLS) may send. Nothing but the exact token of a
// live permit, in a DownstreamEnd entry under the ext_authz namespace,
// releases anything, and each permit is released once.

const hostileYAML = `
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0", grpc_max_recv_bytes: 65536}
leases: {default_ttl: 30s, sweep_interval: 50ms}
bulkheads:
  catalog: {max_concurrent: 10, max_queue: 20, max_wait: 500ms}
  auth: {max_concurrent: 5}
`

// logEntry is an access-log entry of type typ carrying token under ns.
func logEntry(ns, token string, typ datav3.AccessLogType) *datav3.HTTPAccessLogEntry {
	meta := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{ns: {Fields: map[string]*structpb.Value{
		permit.MetadataToken: structpb.NewStringValue(token)}}}}
	return &datav3.HTTPAccessLogEntry{CommonProperties: &datav3.AccessLogCommon{AccessLogType: typ, Metadata: meta}}
}

// logMsg is a StreamAccessLogsMessage of entries, naming node when not "".
func logMsg(node string, entries ...*datav3.HTTPAccessLogEntry) *alsv3.StreamAccessLogsMessage {
	m := &alsv3.StreamAccessLogsMessage{LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{
		HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: entries}}}
	if node != "" {
		m.Identifier = &alsv3.StreamAccessLogsMessage_Identifier{Node: &corev3.Node{Id: node}, LogName: "bulkhead"}
	}
	return m
}

// grant takes a permit of key by a real Check from node, returning its token.
func grant(t *testing.T, rn *running, key, node string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if node != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, authz.NodeHeader, node)
	}
	resp, err := authv3.NewAuthorizationClient(rn.conn).Check(ctx, checkReq(key))
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("Check(%s) = %v, %v", key, resp, err)
	}
	return resp.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue()
}

func inUse(rn *running, key string) int { return rn.r.Registry.Get(key).Snapshot().InUse }

func TestHostileAccessLogTokens(t *testing.T) {
	rn := start(t, parseConfig(t, hostileYAML))
	var tokens []string
	for range 3 {
		tokens = append(tokens, grant(t, rn, "catalog", "front-proxy"))
	}
	kept := grant(t, rn, "auth", "front-proxy") // never named on the stream: must stay held
	tok := tokens[0]
	tampered := []byte(tok)
	tampered[len(tampered)-1] ^= 1
	end := datav3.AccessLogType_DownstreamEnd

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := alsv3.NewAccessLogServiceClient(rn.conn).StreamAccessLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hostile := []*datav3.HTTPAccessLogEntry{
		logEntry(permit.MetadataNamespace, "AAAAAAAAAAAAAAAAAAAAAA", end), // forged, well formed
		logEntry(permit.MetadataNamespace, string(tampered), end),         // a real token, one bit off
		logEntry(permit.MetadataNamespace, tok+"A", end),                  // a real token, extended
		logEntry(permit.MetadataNamespace, tok[:len(tok)-1], end),         // a real token, cut
		logEntry(permit.MetadataNamespace, strings.Repeat("%", 300), end), // not a token at all
		logEntry(permit.MetadataNamespace, "", end),                       // empty
		logEntry("envoy.filters.http.other", tok, end),                    // wrong namespace
		logEntry(permit.MetadataNamespace, tok, datav3.AccessLogType_DownstreamPeriodic),
		logEntry(permit.MetadataNamespace, tok, datav3.AccessLogType_UpstreamPoolReady),
		{}, // nothing at all
	}
	if err := stream.Send(logMsg("front-proxy", hostile...)); err != nil {
		t.Fatal(err)
	}
	// A TCP entry carrying a request's token under the HTTP filter's
	// namespace: a connection's permit is only in the network filter's.
	if err := stream.Send(&alsv3.StreamAccessLogsMessage{LogEntries: &alsv3.StreamAccessLogsMessage_TcpLogs{
		TcpLogs: &alsv3.StreamAccessLogsMessage_TCPAccessLogEntries{LogEntry: []*datav3.TCPAccessLogEntry{{
			CommonProperties: logEntry(permit.MetadataNamespace, tok, datav3.AccessLogType_TcpConnectionEnd).GetCommonProperties()}}}}}); err != nil {
		t.Fatal(err)
	}
	// Each real token once, then each again (duplicates), in one message.
	var real []*datav3.HTTPAccessLogEntry
	for _, tk := range append(tokens, tokens...) {
		real = append(real, logEntry(permit.MetadataNamespace, tk, end))
	}
	if err := stream.Send(logMsg("", real...)); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}

	if got := inUse(rn, "catalog"); got != 0 {
		t.Errorf("catalog in use %d after its tokens were logged", got)
	}
	if got := inUse(rn, "auth"); got != 1 || rn.r.Ledger.Len() != 1 {
		t.Errorf("auth in use %d, ledger %d: a permit never logged was released", got, rn.r.Ledger.Len())
	}
	for _, c := range []struct {
		label string
		want  float64
	}{
		// The periodic entry of a live token renews it (without ending it).
		{"released", 3}, {"duplicate", 3}, {"unknown", 5}, {"no_token", 3}, {"not_end", 2}, {"renewed", 1},
	} {
		if got := counter(t, rn, "bulkhead_access_log_entries_total", c.label); got != c.want {
			t.Errorf("access_log_entries_total{result=%q} = %v, want %v", c.label, got, c.want)
		}
	}
	if got := counter(t, rn, "bulkhead_releases_total", "access_log"); got != 3 {
		t.Errorf("releases{access_log} = %v, want 3", got)
	}
	rn.r.Ledger.Release(kept, permit.Cancel)
}

// A message over listen.grpc_max_recv_bytes ends its stream with
// RESOURCE_EXHAUSTED; permits and other streams are unaffected, and the
// sender may reconnect.
func TestHostileAccessLogOversized(t *testing.T) {
	rn := start(t, parseConfig(t, hostileYAML))
	held := grant(t, rn, "catalog", "front-proxy")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	als := alsv3.NewAccessLogServiceClient(rn.conn)
	stream, err := als.StreamAccessLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var big []*datav3.HTTPAccessLogEntry
	for range 100 {
		big = append(big, logEntry(permit.MetadataNamespace, strings.Repeat("x", 1000), datav3.AccessLogType_DownstreamEnd))
	}
	_ = stream.Send(logMsg("front-proxy", big...)) // ~100 KiB: over the 64 KiB bound
	if _, err := stream.CloseAndRecv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized message: %v, want ResourceExhausted", err)
	}
	if inUse(rn, "catalog") != 1 {
		t.Fatal("the oversized message released a permit")
	}
	stream, err = als.StreamAccessLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(logMsg("front-proxy", logEntry(permit.MetadataNamespace, held, datav3.AccessLogType_DownstreamEnd))); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	if inUse(rn, "catalog") != 0 {
		t.Fatal("a new stream after the oversized one did not release")
	}
}

// A stream may name any node, or none: what it releases is what its tokens
// name, once. Unknown tokens in periodic entries are adopted only for one
// heartbeat TTL after the start (a forgery then costs a permit for one TTL
// at most); later they are ignored.
func TestHostileAccessLogAdoption(t *testing.T) {
	const yaml = `
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
leases: {sweep_interval: 20ms, heartbeat_interval: 100ms, heartbeat_ttl: 400ms, recovery_window: 200ms}
bulkheads:
  catalog: {max_concurrent: 10}
`
	rn := start(t, parseConfig(t, yaml))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	send := func(node string, entries ...*datav3.HTTPAccessLogEntry) {
		t.Helper()
		stream, err := alsv3.NewAccessLogServiceClient(rn.conn).StreamAccessLogs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(logMsg(node, entries...)); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.CloseAndRecv(); err != nil {
			t.Fatal(err)
		}
	}
	periodic := func(token string) *datav3.HTTPAccessLogEntry {
		e := logEntry(permit.MetadataNamespace, token, datav3.AccessLogType_DownstreamPeriodic)
		e.CommonProperties.Metadata.FilterMetadata[permit.MetadataNamespace].Fields[permit.MetadataBulkhead] =
			structpb.NewStringValue("catalog")
		return e
	}
	start := time.Now()
	forged := "AAAAAAAAAAAAAAAAAAAAAA"
	send("never-seen", periodic(forged), periodic("not a token"), periodic(strings.Repeat("A", 10000)))
	if time.Since(start) < 400*time.Millisecond {
		// Within the adoption period the well-formed token is adopted, the
		// others are not; unrenewed, it expires within its TTL.
		if got := counter(t, rn, "bulkhead_permits_adopted_total", "catalog"); got != 1 {
			t.Fatalf("adopted = %v, want 1", got)
		}
	}
	testkit.Eventually(t, "the forged permit's lease to end", func() bool { return inUse(rn, "catalog") == 0 })
	// After the adoption period nothing unknown is adopted, from any node.
	testkit.Eventually(t, "the adoption period to pass", func() bool { return time.Since(start) > 600*time.Millisecond })
	before := counter(t, rn, "bulkhead_permits_adopted_total", "catalog")
	send("bad node id", periodic("BBBBBBBBBBBBBBBBBBBBBA"))
	send("", periodic("CCCCCCCCCCCCCCCCCCCCCA"))
	if inUse(rn, "catalog") != 0 || counter(t, rn, "bulkhead_permits_adopted_total", "catalog") != before {
		t.Fatal("an unknown token was adopted after the adoption period")
	}
	// A real token is a capability: any stream naming it renews it, and
	// ends it, once.
	mine := grant(t, rn, "catalog", "front-proxy")
	send("another-node", periodic(mine))
	if got := counter(t, rn, "bulkhead_access_log_entries_total", "renewed"); got != 1 {
		t.Fatalf("renewals = %v, want 1", got)
	}
	send("another-node", logEntry(permit.MetadataNamespace, mine, datav3.AccessLogType_DownstreamEnd),
		logEntry(permit.MetadataNamespace, mine, datav3.AccessLogType_DownstreamEnd))
	if inUse(rn, "catalog") != 0 {
		t.Fatal("the named permit was not released")
	}
}
