package accesslog_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulkhead-mesh/bulkhead/pkg/accesslog"
	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
	"github.com/bulkhead-mesh/bulkhead/pkg/wire"
)

// The release path as the daemon wires it: the access-log server over a
// real gRPC connection (bufconn), a permit ledger reporting to real
// Prometheus metrics, a registry. Each op is one access-log entry (one
// message: Envoy runs with buffer_size_bytes 0) that releases one permit.
//
//	go test -run '^$' -bench . -benchmem ./pkg/accesslog
//
// BenchmarkHotPath is a whole request's life in the daemon (Check, then its
// entry); it is the one to profile:
//
//	go test -run '^$' -bench HotPath -cpuprofile cpu.prof ./pkg/accesslog

// benchDaemon is the daemon's gRPC services in process, or (noop) a
// server that speaks the same protocol and does nothing: the baseline that
// tells the daemon's own cost from gRPC's and protobuf's.
type benchDaemon struct {
	reg    *bulkhead.Registry
	ledger *permit.Memory // nil for the no-op server
	count  *entryCounter
	server *testkit.Bufconn // the services, on an in-memory listener
}

// entryCounter counts the access-log entries a server handled, so that a
// benchmark can wait for the server to catch up.
type entryCounter struct {
	mu      sync.Mutex
	entries int
	target  int
	reached chan struct{} // closed when entries reaches target
}

func (c *entryCounter) add() {
	c.mu.Lock()
	c.entries++
	if c.entries == c.target {
		close(c.reached)
	}
	c.mu.Unlock()
}

// expect arms the counter: the returned channel is closed once n more
// entries have been handled.
func (c *entryCounter) expect(n int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.target = c.entries + n
	c.reached = make(chan struct{})
	return c.reached
}

// countingRecorder is the metrics recorder that also counts entries.
type countingRecorder struct {
	*metrics.Metrics
	count *entryCounter
}

func (r countingRecorder) LogEntry(result permit.EntryResult) {
	r.Metrics.LogEntry(result)
	r.count.add()
}

const benchBulkhead = "catalog"

// The servers a benchDaemon can run.
const (
	serverBulkhead = "bulkhead"         // the daemon's services, as it registers them (wire codec)
	serverDecoded  = "bulkhead-decoded" // the same services decoding whole messages
	serverNoop     = "noop"             // services that only decode
)

func newBenchDaemon(tb testing.TB, server string) *benchDaemon {
	tb.Helper()
	d := &benchDaemon{reg: bulkhead.NewRegistry(), count: &entryCounter{}}
	gs := grpc.NewServer(wire.ServerCodec())
	if server == serverNoop {
		authv3.RegisterAuthorizationServer(gs, noopAuthz{})
		alsv3.RegisterAccessLogServiceServer(gs, noopALS{count: d.count})
	} else {
		if _, err := d.reg.Apply(map[string]bulkhead.Settings{benchBulkhead: {MaxConcurrent: 1 << 20, MaxQueue: 100}}); err != nil {
			tb.Fatal(err)
		}
		m, err := metrics.New(prometheus.NewRegistry(), d.reg)
		if err != nil {
			tb.Fatal(err)
		}
		d.ledger = permit.NewMemory(clock.Real{}, permit.WithObserver(m))
		backend := admission.NewMemory(d.reg, d.ledger, permit.Heartbeat{})
		als := accesslog.New(backend, countingRecorder{m, d.count}, nil)
		az := authz.New(d.reg, backend, m, authz.DefaultPolicy())
		if server == serverDecoded {
			alsv3.RegisterAccessLogServiceServer(gs, als)
			authv3.RegisterAuthorizationServer(gs, az)
		} else {
			accesslog.Register(gs, als)
			authz.Register(gs, az)
		}
	}
	d.server = testkit.ServeBufconn(tb, gs)
	return d
}

// noopAuthz answers every Check with OK and metadata shaped like the
// bulkhead's (a shared, immutable answer).
type noopAuthz struct {
	authv3.UnimplementedAuthorizationServer
}

var noopOK = &authv3.CheckResponse{
	Status:       &rpcstatus.Status{Code: int32(codes.OK)},
	HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}},
	DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
		permit.MetadataToken:    structpb.NewStringValue("AAAAAAAAAAAAAAAAAAAAAA"),
		permit.MetadataBulkhead: structpb.NewStringValue(benchBulkhead),
	}},
}

func (noopAuthz) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return noopOK, nil
}

// noopALS decodes and counts entries, nothing more.
type noopALS struct {
	alsv3.UnimplementedAccessLogServiceServer
	count *entryCounter
}

func (s noopALS) StreamAccessLogs(stream alsv3.AccessLogService_StreamAccessLogsServer) error {
	for {
		msg, err := stream.Recv()
		if err != nil {
			return nil
		}
		for range msg.GetHttpLogs().GetLogEntry() {
			s.count.add()
		}
	}
}

// open starts an access-log stream; its first message will carry the
// identifier, as Envoy's do. The stream ends at cleanup.
func (d *benchDaemon) open(tb testing.TB, conn *grpc.ClientConn) alsv3.AccessLogService_StreamAccessLogsClient {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := alsv3.NewAccessLogServiceClient(conn).StreamAccessLogs(ctx)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_, _ = stream.CloseAndRecv()
		cancel()
	})
	return stream
}

// grant takes n permits directly and returns their tokens.
func (d *benchDaemon) grant(tb testing.TB, n int) []string {
	tb.Helper()
	l := d.reg.Get(benchBulkhead)
	out := make([]string, n)
	for i := range out {
		p, err := l.TryAcquire(bulkhead.Normal)
		if err != nil {
			tb.Fatal(err)
		}
		if out[i], err = d.ledger.Grant(p, permit.Grant{Bulkhead: benchBulkhead, TTL: time.Minute}); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// envoyEntry is an access-log message shaped like the ones Envoy 1.40
// sends for a request admitted by the bulkhead: one DownstreamEnd entry
// with addresses, timings, the ext_authz metadata and the usual request
// and response properties. The first message of a stream (first == true)
// carries the identifier.
func envoyEntry(token string, first bool) *alsv3.StreamAccessLogsMessage {
	addr := func(port uint32) *corev3.Address {
		return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
	}
	ms := func(v int64) *durationpb.Duration { return durationpb.New(time.Duration(v) * 100 * time.Microsecond) }
	e := &datav3.HTTPAccessLogEntry{
		CommonProperties: &datav3.AccessLogCommon{
			AccessLogType:                  datav3.AccessLogType_DownstreamEnd,
			DownstreamRemoteAddress:        addr(53122),
			DownstreamLocalAddress:         addr(10000),
			DownstreamDirectRemoteAddress:  addr(53122),
			StartTime:                      timestamppb.New(time.Unix(1_790_000_000, 0)),
			TimeToLastRxByte:               ms(1),
			TimeToFirstUpstreamTxByte:      ms(3),
			TimeToLastUpstreamTxByte:       ms(3),
			TimeToFirstUpstreamRxByte:      ms(8),
			TimeToLastUpstreamRxByte:       ms(9),
			TimeToFirstDownstreamTxByte:    ms(9),
			TimeToLastDownstreamTxByte:     ms(9),
			UpstreamRemoteAddress:          addr(8081),
			UpstreamLocalAddress:           addr(40022),
			UpstreamCluster:                benchBulkhead,
			RouteName:                      "",
			ResponseFlags:                  &datav3.ResponseFlags{},
			UpstreamTransportFailureReason: "",
			Metadata: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
				permit.MetadataNamespace: {Fields: map[string]*structpb.Value{
					permit.MetadataToken: structpb.NewStringValue(token),
					"bulkhead":           structpb.NewStringValue(benchBulkhead),
				}},
			}},
		},
		ProtocolVersion: datav3.HTTPAccessLogEntry_HTTP11,
		Request: &datav3.HTTPRequestProperties{
			RequestMethod: corev3.RequestMethod_GET, Scheme: "http", Authority: "127.0.0.1:10000",
			Path: "/catalog", UserAgent: "bench/1", RequestId: "4f9a1c2e-8b7d-4e6f-9a0b-1c2d3e4f5a6b",
			RequestHeadersBytes: 142,
		},
		Response: &datav3.HTTPResponseProperties{
			ResponseCode: wrapperspb.UInt32(200), ResponseHeadersBytes: 120, ResponseBodyBytes: 12,
			ResponseCodeDetails: "via_upstream",
		},
	}
	msg := &alsv3.StreamAccessLogsMessage{LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{
		HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: []*datav3.HTTPAccessLogEntry{e}},
	}}
	if first {
		msg.Identifier = &alsv3.StreamAccessLogsMessage_Identifier{Node: &corev3.Node{Id: "front-proxy", Cluster: "front-proxy"}, LogName: "bulkhead"}
	}
	return msg
}

// benchChunk bounds the permits granted ahead of a timed batch of entries.
const benchChunk = 4096

// BenchmarkAccessLog sends entries that release permits over n concurrent
// streams, each on its own connection (as n Envoy workers do). Granting
// the permits is not timed; each timed batch ends when the server has
// handled every entry of it.
func BenchmarkAccessLog(b *testing.B) {
	for _, streams := range []int{1, 64} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			d := newBenchDaemon(b, serverBulkhead)
			ss := make([]alsv3.AccessLogService_StreamAccessLogsClient, streams)
			opened := d.count.expect(streams)
			for i := range ss {
				ss[i] = d.open(b, d.server.Dial(b))
				if err := ss[i].Send(envoyEntry("", true)); err != nil { // identifier, no token
					b.Fatal(err)
				}
			}
			<-opened
			var sendErr atomic.Pointer[error]
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(benchChunk, b.N-done)
				b.StopTimer()
				tokens := d.grant(b, n)
				msgs := make([]*alsv3.StreamAccessLogsMessage, n)
				for i, t := range tokens {
					msgs[i] = envoyEntry(t, false)
				}
				reached := d.count.expect(n)
				b.StartTimer()
				var wg sync.WaitGroup
				for s, stream := range ss {
					wg.Go(func() {
						for i := s; i < n; i += len(ss) {
							if err := stream.Send(msgs[i]); err != nil {
								sendErr.Store(&err)
								return
							}
						}
					})
				}
				wg.Wait()
				if err := sendErr.Load(); err != nil {
					b.Fatal(*err)
				}
				<-reached
				done += n
			}
			b.StopTimer()
			if got := d.ledger.Len(); got != 0 {
				b.Fatalf("%d permits still held", got)
			}
		})
	}
}

// BenchmarkHotPath is one request's whole life in the daemon: a Check over
// gRPC takes a permit, then the request's access-log entry on a stream of
// the same connection gives it back. server=noop is the same exchange with
// a server that does nothing (it still decodes every message): the
// difference is the daemon's own work. Run with -cpuprofile to see where
// the daemon's time goes.
func BenchmarkHotPath(b *testing.B) {
	for _, server := range []string{serverBulkhead, serverDecoded, serverNoop} {
		b.Run("server="+server, func(b *testing.B) { hotPath(b, server) })
	}
}

func hotPath(b *testing.B, server string) {
	d := newBenchDaemon(b, server)
	conn := d.server.Dial(b)
	client := authv3.NewAuthorizationClient(conn)
	stream := d.open(b, conn)
	reached := d.count.expect(b.N + 1)
	if err := stream.Send(envoyEntry("", true)); err != nil {
		b.Fatal(err)
	}
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "10473498343234583834", Method: "GET", Path: "/catalog", Host: "127.0.0.1:10000", Scheme: "http",
			Headers: map[string]string{":authority": "127.0.0.1:10000", ":method": "GET", ":path": "/catalog",
				":scheme": "http", "user-agent": "bench/1", "accept": "*/*", "x-forwarded-proto": "http",
				"x-request-id": "4f9a1c2e-8b7d-4e6f-9a0b-1c2d3e4f5a6b"},
		}},
		ContextExtensions: map[string]string{"bulkhead": benchBulkhead},
	}}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := client.Check(ctx, req)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		token := resp.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue()
		if err := stream.Send(envoyEntry(token, false)); err != nil {
			b.Fatal(err)
		}
	}
	<-reached
	b.StopTimer()
	if d.ledger != nil && d.ledger.Len() != 0 {
		b.Fatalf("%d permits still held", d.ledger.Len())
	}
}
