package meshsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeDaemon admits up to limit requests per bulkhead, releases on end
// entries, and checks what the simulator sends as a real daemon reads it.
type fakeDaemon struct {
	authv3.UnimplementedAuthorizationServer
	alsv3.UnimplementedAccessLogServiceServer
	t     *testing.T
	limit map[string]int

	mu       sync.Mutex
	held     map[string]string // token -> bulkhead
	ended    map[string]bool   // tokens released
	inUse    map[string]int
	next     int
	ends     int
	periodic int
	streams  map[string]int // by log name
	nodes    map[string]bool
	problems []string
}

func (d *fakeDaemon) problem(s string) {
	d.mu.Lock()
	d.problems = append(d.problems, s)
	d.mu.Unlock()
}

func (d *fakeDaemon) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	node := md.Get(NodeMetadata)
	ext := req.GetAttributes().GetContextExtensions()
	b := ext[authz.ExtBulkhead]
	if len(node) != 1 || b == "" || req.GetAttributes().GetRequest().GetHttp().GetHeaders()[":path"] == "" {
		d.problem("check without node, bulkhead or path")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if l := d.limit[b]; l > 0 && d.inUse[b] >= l {
		return &authv3.CheckResponse{Status: &status.Status{Code: int32(codes.ResourceExhausted)}}, nil
	}
	d.inUse[b]++
	d.next++
	tok := "tok-" + string(rune('a'+d.next%26)) + time.Now().Format(time.RFC3339Nano)
	d.held[tok] = b
	meta, _ := structpb.NewStruct(map[string]any{permit.MetadataToken: tok, permit.MetadataBulkhead: b})
	return &authv3.CheckResponse{Status: &status.Status{}, DynamicMetadata: meta,
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}}}, nil
}

func (d *fakeDaemon) StreamAccessLogs(stream alsv3.AccessLogService_StreamAccessLogsServer) error {
	first := true
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&alsv3.StreamAccessLogsResponse{})
		}
		if err != nil {
			return nil // the client went away: the stream's end
		}
		id := msg.GetIdentifier()
		if first != (id != nil) {
			d.problem("identifier not in exactly the first message")
		}
		d.mu.Lock()
		if first {
			d.streams[id.GetLogName()]++
			d.nodes[id.GetNode().GetId()] = true
			if len(id.GetNode().GetExtensions()) == 0 {
				d.problems = append(d.problems, "identifier without the captured node's extensions")
			}
		}
		for _, e := range msg.GetHttpLogs().GetLogEntry() {
			f := e.GetCommonProperties().GetMetadata().GetFilterMetadata()[permit.MetadataNamespace].GetFields()
			tok := f[permit.MetadataToken].GetStringValue()
			switch e.GetCommonProperties().GetAccessLogType() {
			case datav3.AccessLogType_DownstreamEnd:
				b, ok := d.held[tok]
				if !ok || f[permit.MetadataBulkhead].GetStringValue() != b {
					d.problems = append(d.problems, "end entry of an unknown token")
					continue
				}
				delete(d.held, tok)
				d.ended[tok] = true
				d.inUse[b]--
				d.ends++
			case datav3.AccessLogType_DownstreamPeriodic:
				// The heartbeat log is batched: a periodic entry may come
				// after its request's end entry (the daemon counts it late).
				if _, ok := d.held[tok]; !ok && !d.ended[tok] {
					d.problems = append(d.problems, "periodic entry of an unknown token")
				}
				d.periodic++
			}
		}
		d.mu.Unlock()
		first = false
	}
}

func TestMeshAgainstFakeDaemon(t *testing.T) {
	d := &fakeDaemon{t: t, limit: map[string]int{"tight": 2}, held: map[string]string{}, ended: map[string]bool{}, inUse: map[string]int{},
		streams: map[string]int{}, nodes: map[string]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	authv3.RegisterAuthorizationServer(gs, d)
	alsv3.RegisterAccessLogServiceServer(gs, d)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(ln) })
	defer wg.Wait()
	defer gs.Stop()

	m, err := New(Config{Targets: []string{ln.Addr().String()}, Envoys: 3, Routes: []Route{{Bulkhead: "tight", Limit: 2}, {Bulkhead: "loose"}},
		Tenants: 5, Heartbeat: 200 * time.Millisecond, Ping: 50 * time.Millisecond,
		Durations: []DurationShare{{10 * time.Millisecond, 1}, {450 * time.Millisecond, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.Connect(ctx, 4); err != nil {
		t.Fatal(err)
	}
	m.Run(ctx, ctx, 200, time.Second)
	time.Sleep(300 * time.Millisecond) // the heartbeat log's last batch (a quarter interval)
	m.Close()

	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.problems {
		t.Error(p)
	}
	if m.Connections() != 6 || len(d.nodes) != 3 {
		t.Errorf("connections %d, nodes %d: want 6 and 3", m.Connections(), len(d.nodes))
	}
	if d.streams["bulkhead"] != 6 || d.streams["bulkhead-heartbeat"] != 6 {
		t.Errorf("streams %v: want 6 of each log (one per worker)", d.streams)
	}
	ok := m.Stats.ChecksOK.Load()
	if ok == 0 || int64(d.ends) != ok || len(d.held) != 0 {
		t.Errorf("admitted %d, end entries %d, permits still held %d", ok, d.ends, len(d.held))
	}
	if d.periodic == 0 || m.Stats.Denied.Load() == 0 {
		t.Errorf("periodic entries %d, denials %d: want some of each", d.periodic, m.Stats.Denied.Load())
	}
	if r := m.Caps.Report(); r.Violations != 0 || r.AtLimit != 1 {
		t.Errorf("caps %+v: want the tight bulkhead at its limit, never past it", r)
	}
	if m.Pings() == 0 {
		t.Error("no PING sent")
	}
}

// TestPingConnWritesBetweenFrames: PINGs asked for while a frame is half
// written go out after it, and the stream stays valid HTTP/2.
func TestPingConnWritesBetweenFrames(t *testing.T) {
	var out bytes.Buffer
	c := newPingConn(&bufConn{w: &out}, newPinger())
	var frames bytes.Buffer
	fr := http2.NewFramer(&frames, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, false, bytes.Repeat([]byte("x"), 1000)); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, true, []byte("end")); err != nil {
		t.Fatal(err)
	}
	b := frames.Bytes()
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	pings := 0
	// Write in small, odd pieces, asking for a PING before each.
	for i := 0; i < len(b); i += 7 {
		if c.ping() {
			pings++
		}
		c.mu.Lock()
		pending := c.pending
		c.mu.Unlock()
		if pending {
			pings++
		}
		if _, err := c.Write(b[i:min(i+7, len(b))]); err != nil {
			t.Fatal(err)
		}
	}
	got := out.Bytes()
	if !bytes.HasPrefix(got, []byte(http2.ClientPreface)) {
		t.Fatal("preface lost")
	}
	rd := http2.NewFramer(nil, bytes.NewReader(got[len(http2.ClientPreface):]))
	var kinds []http2.FrameType
	for {
		f, err := rd.ReadFrame()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %v: %v", kinds, err)
		}
		kinds = append(kinds, f.Header().Type)
	}
	var data, settings, ping int
	for _, k := range kinds {
		switch k {
		case http2.FrameData:
			data++
		case http2.FrameSettings:
			settings++
		case http2.FramePing:
			ping++
		}
	}
	if data != 2 || settings != 1 || ping == 0 {
		t.Errorf("frames %v: want 1 SETTINGS, 2 DATA and PINGs between them", kinds)
	}
}

// bufConn is a net.Conn that writes into w.
type bufConn struct {
	net.Conn
	w io.Writer
}

func (c *bufConn) Write(b []byte) (int, error)      { return c.w.Write(b) }
func (c *bufConn) SetWriteDeadline(time.Time) error { return nil }

func TestSpreadPlace(t *testing.T) {
	tests := []struct {
		spread Spread
		worker int
		k      int
		want   placement
	}{
		{SpreadRequest, 0, 1, placement{replicas: []int{0}}},
		{SpreadWorker, 5, 1, placement{replicas: []int{0}}},
		{SpreadRequest, 0, 2, placement{replicas: []int{0, 1}, release: 0, heartbeat: 1}},
		{SpreadRequest, 1, 2, placement{replicas: []int{0, 1}, release: 1, heartbeat: 0}},
		{SpreadRequest, 4, 3, placement{replicas: []int{0, 1, 2}, release: 1, heartbeat: 2}},
		{SpreadWorker, 0, 2, placement{replicas: []int{0}}},
		{SpreadWorker, 3, 2, placement{replicas: []int{1}}},
		{SpreadWorker, 5, 3, placement{replicas: []int{2}}},
	}
	for _, tt := range tests {
		got := tt.spread.place(tt.worker, tt.k)
		if !slices.Equal(got.replicas, tt.want.replicas) || got.release != tt.want.release || got.heartbeat != tt.want.heartbeat {
			t.Errorf("%s.place(%d, %d) = %+v, want %+v", tt.spread, tt.worker, tt.k, got, tt.want)
		}
	}
}

// replicaView is one replica of a fakeDaemon that several serve (one
// ledger): it counts the connections, Checks and streams it serves.
type replicaView struct {
	*fakeDaemon
	conns, checks, streams atomic.Int64
}

func (r *replicaView) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	r.checks.Add(1)
	return r.fakeDaemon.Check(ctx, req)
}

func (r *replicaView) StreamAccessLogs(stream alsv3.AccessLogService_StreamAccessLogsServer) error {
	r.streams.Add(1)
	return r.fakeDaemon.StreamAccessLogs(stream)
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestMeshSpreadsOverReplicas: with two replicas, SpreadRequest connects
// every worker to both, sends its Checks to each in turn and opens its two
// streams on different replicas; SpreadWorker pins each worker to one.
func TestMeshSpreadsOverReplicas(t *testing.T) {
	tests := []struct {
		spread       Spread
		conns        int // in all
		connsPerRepl int64
	}{
		{SpreadRequest, 12, 6},
		{SpreadWorker, 6, 3},
	}
	for _, tt := range tests {
		t.Run(string(tt.spread), func(t *testing.T) {
			d := &fakeDaemon{t: t, limit: map[string]int{}, held: map[string]string{}, ended: map[string]bool{}, inUse: map[string]int{},
				streams: map[string]int{}, nodes: map[string]bool{}}
			var views [2]*replicaView
			var targets []string
			var wg sync.WaitGroup
			defer wg.Wait()
			for i := range views {
				views[i] = &replicaView{fakeDaemon: d}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				gs := grpc.NewServer()
				authv3.RegisterAuthorizationServer(gs, views[i])
				alsv3.RegisterAccessLogServiceServer(gs, views[i])
				wg.Go(func() { _ = gs.Serve(countingListener{ln, &views[i].conns}) })
				defer gs.Stop()
				targets = append(targets, ln.Addr().String())
			}
			m, err := New(Config{Targets: targets, Spread: tt.spread, Envoys: 3, Routes: []Route{{Bulkhead: "loose"}},
				Heartbeat: 200 * time.Millisecond, Ping: -1, Durations: []DurationShare{{10 * time.Millisecond, 1}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := m.Connect(ctx, 4); err != nil {
				t.Fatal(err)
			}
			m.Run(ctx, ctx, 400, 500*time.Millisecond)
			// The end entries sent are on their way: Close would cut them off.
			testkit.Eventually(t, "every end entry received", func() bool {
				d.mu.Lock()
				defer d.mu.Unlock()
				return int64(d.ends) == m.Stats.ChecksOK.Load()
			})
			m.Close()

			d.mu.Lock()
			defer d.mu.Unlock()
			for _, p := range d.problems {
				t.Error(p)
			}
			if m.Connections() != tt.conns {
				t.Errorf("Connections() = %d, want %d", m.Connections(), tt.conns)
			}
			// A Check that timed out on a busy machine leaves its permit held.
			ok := m.Stats.ChecksOK.Load()
			if ok == 0 || int64(d.ends) != ok || int64(len(d.held)) > m.Stats.Errored.Load() {
				t.Errorf("admitted %d, end entries %d, permits still held %d (Check errors %v)", ok, d.ends, len(d.held), m.Stats.ErrorCodes())
			}
			for i, v := range views {
				// Each replica serves half the workers' release streams (the
				// requests end before any periodic entry), and about half the
				// Checks.
				if v.conns.Load() != tt.connsPerRepl || v.streams.Load() != 3 || v.checks.Load() < ok/4 {
					t.Errorf("replica %d: %d connections, %d streams, %d of %d Checks; want %d, 3, about half",
						i, v.conns.Load(), v.streams.Load(), v.checks.Load(), ok, tt.connsPerRepl)
				}
			}
		})
	}
}

// TestDaemonConfigLedger renders the daemon's configuration for each
// ledger and reads it as the daemon does.
func TestDaemonConfigLedger(t *testing.T) {
	tests := []struct {
		ledger  Ledger
		backend config.LedgerBackend
		leases  bool
	}{
		{LedgerMemory, config.LedgerMemory, false},
		{LedgerRedis, config.LedgerRedis, false},
		{LedgerLeases, config.LedgerRedis, true},
	}
	routes := []Route{{Bulkhead: "tight", Limit: 4}, {Bulkhead: "loose"}}
	for _, tt := range tests {
		t.Run(string(tt.ledger), func(t *testing.T) {
			text := DaemonConfig("127.0.0.1:7000", routes, false, tt.ledger.yaml("127.0.0.1:6390"))
			c, err := config.Parse("meshsim.yaml", []byte(text))
			if err != nil {
				t.Fatalf("%v\n%s", err, text)
			}
			l := c.Ledger
			// Capacity leases are on by default; only the Redis ledger reads them.
			if l.Backend != tt.backend || (tt.ledger.shared() && l.Redis.CapacityLeases != tt.leases) || len(c.Bulkheads) != 2 {
				t.Fatalf("backend %v, capacity leases %v, %d bulkheads; want %v, %v, 2\n%s", l.Backend, l.Redis.CapacityLeases,
					len(c.Bulkheads), tt.backend, tt.leases, text)
			}
			if tt.ledger.shared() && (l.Redis.Address != "127.0.0.1:6390" || l.OnUnavailable != admission.FailClosed) {
				t.Fatalf("redis address %q, on_unavailable %v; want 127.0.0.1:6390, fail_closed", l.Redis.Address, l.OnUnavailable)
			}
		})
	}
}

// TestDaemonConfigShares: with shares, every bulkhead of the plan is in
// that mode with its default share cluster, and the unlimited ones have
// a limit of SharesUnlimited; the priming bulkhead stays strict.
func TestDaemonConfigShares(t *testing.T) {
	p := Plan{Bulkheads: 4, Limited: true, Shares: "auto"}
	text := DaemonConfig("127.0.0.1:7000", append(p.Routes(), Route{Bulkhead: warmupBulkhead}), false, "")
	c, err := config.Parse("meshsim.yaml", []byte(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	pol := c.Policies()
	if pol["bh-000"].Mode != shares.Auto || pol["bh-001"].Cluster != shareCluster("bh-001") || pol[warmupBulkhead].Mode != shares.Strict {
		t.Errorf("policies %v\n%s", pol, text)
	}
	if l0, l1 := c.Bulkheads["bh-000"].Settings.MaxConcurrent, c.Bulkheads["bh-001"].Settings.MaxConcurrent; l0 != 4 || l1 != SharesUnlimited {
		t.Errorf("limits %d and %d: want 4 and %d", l0, l1, SharesUnlimited)
	}
}

func TestPlanCheck(t *testing.T) {
	ok := Plan{Ledger: LedgerMemory, Replicas: 1, Spread: SpreadRequest, Storm: true}
	tests := []struct {
		name string
		edit func(*Plan)
		ok   bool
	}{
		{"memory, one daemon, the storm", func(*Plan) {}, true},
		{"leases, two replicas, no storm", func(p *Plan) { p.Ledger, p.Replicas, p.Storm = LedgerLeases, 2, false }, true},
		{"redis, one replica, the storm", func(p *Plan) { p.Ledger = LedgerRedis }, true},
		{"unknown ledger", func(p *Plan) { p.Ledger = "etcd" }, false},
		{"unknown spread", func(p *Plan) { p.Spread = "random" }, false},
		{"no replica", func(p *Plan) { p.Replicas = 0 }, false},
		{"replicas in memory", func(p *Plan) { p.Replicas, p.Storm = 2, false }, false},
		{"the storm with replicas", func(p *Plan) { p.Ledger, p.Replicas = LedgerRedis, 2 }, false},
		{"shares, no storm", func(p *Plan) { p.Shares, p.Storm = "shares", false }, true},
		{"auto, no storm", func(p *Plan) { p.Shares, p.Storm = "auto", false }, true},
		{"shares mode strict", func(p *Plan) { p.Shares, p.Storm = "strict", false }, false},
		{"shares with the storm", func(p *Plan) { p.Shares = "shares" }, false},
		{"shares with tenants", func(p *Plan) { p.Shares, p.Storm, p.Tenants = "shares", false, 10 }, false},
		{"shares on redis per request", func(p *Plan) { p.Shares, p.Storm, p.Ledger = "shares", false, LedgerRedis }, false},
		{"shares on capacity leases, two replicas", func(p *Plan) { p.Shares, p.Storm, p.Ledger, p.Replicas = "auto", false, LedgerLeases, 2 }, true},
	}
	for _, tt := range tests {
		p := ok
		tt.edit(&p)
		if err := p.check(); (err == nil) != tt.ok {
			t.Errorf("%s: check() = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// metricsOf parses a /metrics exposition.
func metricsOf(t *testing.T, text string) *testbed.Metrics {
	t.Helper()
	m, err := testbed.ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLedgerCost: two replicas' ledger calls and lease admissions, and
// Redis's INFO, before and after a window of 1,000 admissions (and 10
// denials).
func TestLedgerCost(t *testing.T) {
	info := func(evalsha, eval int64, cpu time.Duration) *redisproc.Info {
		text := fmt.Sprintf("used_cpu_sys:0\nused_cpu_user:%f\ncmdstat_evalsha:calls=%d,usec=%d\ncmdstat_eval:calls=%d,usec=%d\n"+
			"cmdstat_info:calls=9,usec=1\n", cpu.Seconds(), evalsha, 10*evalsha, eval, 10*eval)
		i, err := redisproc.ParseInfo(text)
		if err != nil {
			t.Fatal(err)
		}
		return &i
	}
	replica := func(lease, release, timeouts, leased float64) *testbed.Metrics {
		return metricsOf(t, fmt.Sprintf(`bulkhead_ledger_calls_total{op="lease",result="ok"} %g
bulkhead_ledger_calls_total{op="release",result="ok"} %g
bulkhead_ledger_calls_total{op="release",result="timeout"} %g
bulkhead_ledger_lease_admitted_total{dependency="a"} %g
bulkhead_ledger_lease_admitted_total{dependency="b"} 7
`, lease, release, timeouts, leased))
	}
	at := time.Unix(1000, 0)
	before := reading{at: at, scrape: scrape{replica(100, 10, 0, 50), replica(100, 0, 1, 0)}, redis: info(300, 2, time.Second)}
	after := reading{at: at.Add(20 * time.Second), scrape: scrape{replica(140, 30, 0, 550), replica(160, 10, 3, 450)},
		redis: info(450, 2, 1010*time.Millisecond)}
	// The bare Redis: 0.6 ms over 3 s, 0.2 ms a second: 4 ms of the
	// window's 10 ms.
	c := ledgerCost(before, after, 1000, 1010, redisproc.Floor{Window: 3 * time.Second, CPU: 600 * time.Microsecond})
	if c == nil {
		t.Fatal("ledgerCost = nil")
	}
	if !near(c.RedisBareCPU, 0.2) || !near(c.RedisCPUAboveBare, 6) {
		t.Errorf("bare Redis %g ms/s, Redis CPU above it %g us per admitted; want 0.2, 6", c.RedisBareCPU, c.RedisCPUAboveBare)
	}
	if c := ledgerCost(before, after, 1000, 1010, redisproc.Floor{}); c.RedisBareCPU != 0 || !near(c.RedisCPUAboveBare, 10) {
		t.Errorf("no floor: bare Redis %g ms/s, Redis CPU above it %g us per admitted; want 0, 10 (all of it)", c.RedisBareCPU, c.RedisCPUAboveBare)
	}
	// lease: 40 + 60, release: 20 + 10 + 2 timeouts.
	want := map[string]float64{"lease": 0.1, "release": 0.032}
	if !maps.Equal(c.Calls, want) || !near(c.CallsPerAdmitted, 0.132) || c.Failed != 2 {
		t.Errorf("calls %v (%g in all), failed %g; want %v (0.132), 2", c.Calls, c.CallsPerAdmitted, c.Failed, want)
	}
	if !near(c.ScriptsPerAdmitted, 0.15) || !near(c.ScriptUsPerAdmitted, 1.5) || !near(c.RedisCPUPerAdmitted, 10) || !near(c.RedisCPUPer1k, 10/1.01) || !near(c.FromLeases, 0.95) {
		t.Errorf("scripts %g, Redis CPU %g us per admitted, %g ms per 1k, from leases %g; want 0.15, 10, 9.9, 0.95",
			c.ScriptsPerAdmitted, c.RedisCPUPerAdmitted, c.RedisCPUPer1k, c.FromLeases)
	}
	if r := redisCPURate(before, after); !near(r, 0.5) {
		t.Errorf("redisCPURate = %g ms/s, want 0.5", r)
	}
	if ledgerCost(reading{scrape: before.scrape}, reading{scrape: after.scrape}, 1000, 1000, redisproc.Floor{}) != nil ||
		ledgerCost(before, after, 0, 0, redisproc.Floor{}) != nil {
		t.Error("a cost without Redis's figures or without admissions")
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }

// TestMarkdownLedgerTable: the shared ledger's table is written with a
// shared ledger only.
func TestMarkdownLedgerTable(t *testing.T) {
	run := Result{Envoys: 100, Admitted: 20000, Checks: 20000, Ledger: &LedgerCost{Calls: map[string]float64{"lease": 0.01, "release": 0.5},
		CallsPerAdmitted: 0.51, ScriptsPerAdmitted: 0.6, RedisCPUPerAdmitted: 12.5, RedisCPUAboveBare: 10.1, RedisCPUPer1k: 12.5,
		RedisIdleCPU: 9, RedisBareCPU: 2.4, FromLeases: 1}}
	// A results.json from before the bare floor was measured.
	old := run
	old.Envoys, old.Ledger = 1000, &LedgerCost{Calls: map[string]float64{}, RedisCPUPerAdmitted: 12.5, RedisCPUAboveBare: 0}
	tests := []struct {
		plan Plan
		want []string
		not  []string
	}{
		{Plan{Ledger: LedgerMemory, Replicas: 1, Limited: true}, []string{"every fourth limited to 4", "one daemon on the in-memory ledger"},
			[]string{"The shared ledger"}},
		{Plan{Ledger: LedgerLeases, Replicas: 2, Spread: SpreadRequest}, []string{"none limited", "2 daemon replicas on the Redis ledger with capacity leases",
			"| 100 | 20000 | 0.5100 | release 0.5000, lease 0.0100 | 0 | 0.6000 | 0.00 us | 12.50 us | 10.10 us | 12.50 ms | 9.00 ms/s | 2.40 ms/s | 100.0% |",
			"| 1000 | 20000 | 0.0000 | none | 0 | 0.0000 | 0.00 us | 12.50 us | - | 0.00 ms | 0.00 ms/s | - | 0.0% |",
			"| Redis CPU per admitted request | above the bare floor | Redis CPU per 1,000 requests | Redis CPU idle | bare Redis idle |"}, nil},
	}
	for _, tt := range tests {
		r := &Results{Plan: tt.plan, Runs: []Result{run, old}}
		var b strings.Builder
		r.Markdown(&b)
		for _, s := range tt.want {
			if !strings.Contains(b.String(), s) {
				t.Errorf("%s: no %q in\n%s", tt.plan.Ledger, s, b.String())
			}
		}
		for _, s := range tt.not {
			if strings.Contains(b.String(), s) {
				t.Errorf("%s: %q in\n%s", tt.plan.Ledger, s, b.String())
			}
		}
	}
}
