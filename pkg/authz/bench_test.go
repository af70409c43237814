package authz_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
	"github.com/bulkhead-mesh/bulkhead/pkg/wire"
)

// The Check path as the daemon wires it: a real registry, a permit ledger
// that reports to real Prometheus metrics, and the authz server. Every op is
// one Check followed by the release of its permit through the ledger (what
// the access log does), so the benchmarks run at a steady state.
//
//	go test -run '^$' -bench 'Check' -benchmem ./pkg/authz
//
// The scale goal: BenchmarkCheckBulkheads stays flat (within 1.2x) from 10
// to 10,000 bulkheads.

// benchStack is the daemon's Check path in process.
type benchStack struct {
	reg    *bulkhead.Registry
	ledger *permit.Memory
	srv    *authz.Server
	reqs   []*authv3.CheckRequest // one per bulkhead
}

// newBenchStack configures n bulkheads bench-0000.. with limit permits each.
func newBenchStack(tb testing.TB, n, limit int) *benchStack {
	tb.Helper()
	s := &benchStack{reg: bulkhead.NewRegistry()}
	want := make(map[string]bulkhead.Settings, n)
	for i := range n {
		key := fmt.Sprintf("bench-%05d", i)
		want[key] = bulkhead.Settings{MaxConcurrent: limit, MaxQueue: 100, MaxWait: 500 * time.Millisecond,
			ReserveCritical: 0.1}
		s.reqs = append(s.reqs, envoyCheck(key))
	}
	if _, err := s.reg.Apply(want); err != nil {
		tb.Fatal(err)
	}
	m, err := metrics.New(prometheus.NewRegistry(), s.reg)
	if err != nil {
		tb.Fatal(err)
	}
	s.ledger = permit.NewMemory(clock.Real{}, permit.WithObserver(m))
	s.srv = authz.New(s.reg, admission.NewMemory(s.reg, s.ledger, permit.Heartbeat{}), m, authz.DefaultPolicy())
	return s
}

// check runs one Check and returns its token.
func (s *benchStack) check(tb testing.TB, ctx context.Context, req *authv3.CheckRequest) string {
	resp, err := s.srv.Check(ctx, req)
	if err != nil {
		tb.Fatal(err)
	}
	token := resp.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue()
	if token == "" {
		tb.Fatalf("not admitted: %v", resp)
	}
	return token
}

// envoyCheck is a CheckRequest shaped like the ones Envoy 1.40 sends for a
// plain GET through the front proxy (addresses, the usual headers, the
// route's context_extensions).
func envoyCheck(key string) *authv3.CheckRequest {
	addr := func(port uint32) *authv3.AttributeContext_Peer {
		return &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}},
		}}}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      addr(53122),
		Destination: addr(10000),
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id:     "10473498343234583834",
			Method: "GET",
			Headers: map[string]string{
				":authority": "127.0.0.1:10000", ":method": "GET", ":path": "/" + key, ":scheme": "http",
				"user-agent": "bench/1", "accept": "*/*", "x-forwarded-proto": "http",
				"x-request-id": "4f9a1c2e-8b7d-4e6f-9a0b-1c2d3e4f5a6b",
			},
			Path: "/" + key, Host: "127.0.0.1:10000", Scheme: "http", Protocol: "HTTP/1.1",
		}},
		ContextExtensions: map[string]string{"bulkhead": key},
	}}
}

// BenchmarkCheck is one Check and its release, the handler called directly.
func BenchmarkCheck(b *testing.B) {
	s := newBenchStack(b, 1, 1<<20)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s.ledger.Release(s.check(b, ctx, s.reqs[0]), permit.AccessLog)
	}
}

// BenchmarkCheckBulkheads measures a Check and its release with n
// bulkheads configured (goal: within 1.2x from 10 to 10,000). spread=all
// sends the Checks round-robin over every bulkhead, so each one touches a
// different bulkhead's state (limiter, metric series): the worst case for
// the CPU caches. spread=one sends them all to one bulkhead: what having n
// bulkheads costs a Check, the registry's and the metrics' own scaling.
func BenchmarkCheckBulkheads(b *testing.B) {
	for _, spread := range []string{"all", "one"} {
		for _, n := range []int{10, 100, 1000, 10000} {
			b.Run(fmt.Sprintf("spread=%s/bulkheads=%d", spread, n), func(b *testing.B) {
				s := newBenchStack(b, n, 64)
				ctx := context.Background()
				for _, req := range s.reqs {
					// Warm up: each bulkhead's metric series is created by
					// its first Check; measure the steady state.
					s.ledger.Release(s.check(b, ctx, req), permit.AccessLog)
				}
				keys := n
				if spread == "one" {
					keys = 1
				}
				i := 0
				b.ReportAllocs()
				for b.Loop() {
					s.ledger.Release(s.check(b, ctx, s.reqs[i]), permit.AccessLog)
					if i++; i == keys {
						i = 0
					}
				}
			})
		}
	}
}

// BenchmarkCheckInflight measures a Check and its release while n other
// permits are held (leases in the ledger, permits in the limiter).
func BenchmarkCheckInflight(b *testing.B) {
	for _, n := range []int{100, 1000, 10000, 100000} {
		b.Run(fmt.Sprintf("inflight=%d", n), func(b *testing.B) {
			s := newBenchStack(b, 1, 1<<20)
			ctx := context.Background()
			held := make([]string, n)
			for i := range held {
				held[i] = s.check(b, ctx, s.reqs[0])
			}
			b.Cleanup(func() {
				for _, t := range held {
					s.ledger.Release(t, permit.AccessLog)
				}
			})
			b.ReportAllocs()
			for b.Loop() {
				s.ledger.Release(s.check(b, ctx, s.reqs[0]), permit.AccessLog)
			}
		})
	}
}

// BenchmarkCheckParallel is BenchmarkCheck from every P at once, over 100
// bulkheads (Envoy sends Checks for many routes concurrently).
func BenchmarkCheckParallel(b *testing.B) {
	s := newBenchStack(b, 100, 1<<16)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		i := 0
		for pb.Next() {
			s.ledger.Release(s.check(b, ctx, s.reqs[i%len(s.reqs)]), permit.AccessLog)
			i += 7
		}
	})
}

// BenchmarkCheckGRPC is BenchmarkCheck through a real gRPC server and
// client over bufconn: protobuf decoding and encoding, HTTP/2 framing, the
// deadline Envoy sets (1s).
func BenchmarkCheckGRPC(b *testing.B) {
	s := newBenchStack(b, 1, 1<<20)
	gs := grpc.NewServer(wire.ServerCodec())
	authz.Register(gs, s.srv)
	client := authv3.NewAuthorizationClient(testkit.ServeBufconn(b, gs).Dial(b))
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := client.Check(ctx, s.reqs[0])
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		s.ledger.Release(resp.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue(), permit.AccessLog)
	}
}
