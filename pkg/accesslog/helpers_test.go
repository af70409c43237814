package accesslog

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
	"github.com/bulkhead-mesh/bulkhead/pkg/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeRecorder counts what the server records.
type fakeRecorder struct {
	mu       sync.Mutex
	outcomes map[string]map[bulkhead.Outcome]int
	entries  map[string]int // LogEntry, by result
	others   map[string]int // Adopted and HeartbeatProblem, as "adopted:DEP", "problem:P"
	lags     []time.Duration
	streams  atomic.Int64
	opened   atomic.Int64
}

var _ Recorder = (*fakeRecorder)(nil)

func newFakeRecorder() *fakeRecorder {
	return &fakeRecorder{outcomes: map[string]map[bulkhead.Outcome]int{}, entries: map[string]int{}, others: map[string]int{}}
}

func (r *fakeRecorder) Outcome(dep string, o bulkhead.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outcomes[dep] == nil {
		r.outcomes[dep] = map[bulkhead.Outcome]int{}
	}
	r.outcomes[dep][o]++
}

func (r *fakeRecorder) ReleaseLag(dep string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lags = append(r.lags, d)
}

func (r *fakeRecorder) LogEntry(result permit.EntryResult) {
	r.mu.Lock()
	r.entries[string(result)]++
	r.mu.Unlock()
}

func (r *fakeRecorder) Adopted(dep string) {
	r.mu.Lock()
	r.others["adopted:"+dep]++
	r.mu.Unlock()
}

func (r *fakeRecorder) HeartbeatProblem(p permit.HeartbeatProblem) {
	r.mu.Lock()
	r.others["problem:"+string(p)]++
	r.mu.Unlock()
}

func (r *fakeRecorder) StreamOpened() { r.streams.Add(1); r.opened.Add(1) }
func (r *fakeRecorder) StreamClosed() { r.streams.Add(-1) }

func (r *fakeRecorder) entryCount(result string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.entries[result]
}

// otherCount is the count of an adoption ("adopted:DEP") or a problem
// ("problem:P").
func (r *fakeRecorder) otherCount(what string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.others[what]
}

func (r *fakeRecorder) outcomeCount(dep string, o bulkhead.Outcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcomes[dep][o]
}

// env is a Server over a real ledger and registry, reached over bufconn.
type env struct {
	reg    *bulkhead.Registry
	ledger *permit.Memory
	rec    *fakeRecorder
	client alsv3.AccessLogServiceClient
}

func newEnv(t *testing.T, srvOpts ...func(*Server)) *env {
	t.Helper()
	e := &env{reg: bulkhead.NewRegistry(), rec: newFakeRecorder()}
	if _, err := e.reg.Apply(map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 1000}}); err != nil {
		t.Fatal(err)
	}
	e.ledger = permit.NewMemory(clock.Real{})
	srv := New(admission.NewMemory(e.reg, e.ledger, permit.Heartbeat{}), e.rec, nil)
	for _, o := range srvOpts {
		o(srv)
	}
	e.client = alsv3.NewAccessLogServiceClient(serve(t, srv))
	return e
}

// serve runs srv on a bufconn gRPC server and returns a client connection;
// both are stopped when the test ends.
func serve(t *testing.T, srv *Server) *grpc.ClientConn {
	t.Helper()
	gs := grpc.NewServer(wire.ServerCodec())
	Register(gs, srv)
	return testkit.ServeBufconn(t, gs).Dial(t)
}

// grant takes a permit of catalog and registers it; it returns the token.
func (e *env) grant(t testing.TB) string {
	t.Helper()
	p, err := e.reg.Get("catalog").TryAcquire(bulkhead.Normal)
	if err != nil {
		t.Fatal(err)
	}
	token, err := e.ledger.Grant(p, permit.Grant{Bulkhead: "catalog", Priority: bulkhead.Normal, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return token
}

func (e *env) inUse() int { return e.reg.Get("catalog").Snapshot().InUse }

// send opens a stream, sends msgs, closes it and waits for the server to
// have handled every message (CloseAndRecv returns after the handler).
func (e *env) send(t testing.TB, msgs ...*alsv3.StreamAccessLogsMessage) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := e.client.StreamAccessLogs(ctx)
	if err != nil {
		t.Fatalf("StreamAccessLogs: %v", err)
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatalf("CloseAndRecv: %v", err)
	}
}

func tokenMeta(token string) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		permit.MetadataNamespace: {Fields: map[string]*structpb.Value{
			permit.MetadataToken: structpb.NewStringValue(token),
			"bulkhead":           structpb.NewStringValue("catalog"),
		}},
	}}
}

func httpEntry(meta *corev3.Metadata, typ datav3.AccessLogType, code uint32, flags *datav3.ResponseFlags) *datav3.HTTPAccessLogEntry {
	e := &datav3.HTTPAccessLogEntry{
		CommonProperties: &datav3.AccessLogCommon{AccessLogType: typ, Metadata: meta, ResponseFlags: flags},
		Response:         &datav3.HTTPResponseProperties{},
	}
	if code != 0 {
		e.Response.ResponseCode = wrapperspb.UInt32(code)
	}
	return e
}

func endOf(token string) *datav3.HTTPAccessLogEntry {
	return httpEntry(tokenMeta(token), datav3.AccessLogType_DownstreamEnd, 200, nil)
}

func httpLogs(id *alsv3.StreamAccessLogsMessage_Identifier, entries ...*datav3.HTTPAccessLogEntry) *alsv3.StreamAccessLogsMessage {
	return &alsv3.StreamAccessLogsMessage{
		Identifier: id,
		LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: entries}},
	}
}

func ident(node string) *alsv3.StreamAccessLogsMessage_Identifier {
	return &alsv3.StreamAccessLogsMessage_Identifier{Node: &corev3.Node{Id: node}, LogName: "bulkhead"}
}

// viewOf is what the server reads of e, from its encoding; it fails the
// test when that differs from what it reads of the decoded entry.
func viewOf(t *testing.T, e *datav3.HTTPAccessLogEntry) *entry {
	t.Helper()
	msg := httpLogs(nil, e)
	var decoded, read message
	messageOf(msg, &decoded)
	if err := read.UnmarshalWire(marshal(t, msg)); err != nil {
		t.Fatal(err)
	}
	if len(read.entries) != 1 || !sameEntry(read.entries[0], decoded.entries[0]) {
		t.Fatalf("wire read %+v, decoded %+v", read.entries, decoded.entries)
	}
	return &read.entries[0]
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameEntry reports whether two entries read alike.
func sameEntry(a, b entry) bool {
	return a.conn == b.conn && a.end == b.end && a.periodic == b.periodic && a.token == b.token && bytes.Equal(a.bulkhead, b.bulkhead) &&
		a.code == b.code && a.flags == b.flags && a.firstUpstreamTx == b.firstUpstreamTx && a.lastUpstreamRx == b.lastUpstreamRx
}
