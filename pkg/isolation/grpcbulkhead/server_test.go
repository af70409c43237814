package grpcbulkhead

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func serverOpts(reg *bulkhead.Registry, opts ...Option) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(reg, byMethod, opts...)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(reg, byMethod, opts...)),
	}
}

// TestServerUnary: a normal call finds the normal ceiling full and gets
// RESOURCE_EXHAUSTED with details and trailer; a critical one is admitted.
func TestServerUnary(t *testing.T) {
	reg := registry(t, map[string]bulkhead.Settings{"check": {MaxConcurrent: 2, ReserveCritical: 0.5}})
	obs := &observer{}
	client, hs := setup(t, serverOpts(reg, WithRetryAfter(3*time.Second), WithObserver(obs)))
	ctx := context.Background()
	first := async(func() error { _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); return err })
	wait(t, hs.entered)

	var trailer metadata.MD
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || ReasonOf(err) != bulkhead.ReasonQueueFull {
		t.Fatalf("rejection: %v", err)
	}
	var info *errdetails.ErrorInfo
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.RetryInfo:
			retry = d
		}
	}
	if info.GetReason() != "QUEUE_FULL" || info.GetDomain() != ErrorDomain || info.GetMetadata()["bulkhead"] != "check" ||
		retry.GetRetryDelay().AsDuration() != 3*time.Second || trailer.Get("x-bulkhead-reason")[0] != "queue_full" {
		t.Fatalf("details %v %v, trailer %v", info, retry, trailer)
	}

	crit := async(func() error {
		_, err := client.Check(metadata.AppendToOutgoingContext(ctx, "x-bulkhead-priority", "critical"), &healthpb.HealthCheckRequest{})
		return err
	})
	wait(t, hs.entered)
	hs.open()
	for _, ch := range []<-chan error{first, crit} {
		if err := wait(t, ch); err != nil {
			t.Fatal(err)
		}
	}
	if s := reg.Get("check").Snapshot(); s.InUse != 0 || s.Admitted[bulkhead.Critical] != 1 {
		t.Fatalf("snapshot %+v", s)
	}
	if a, f, bad := obs.counts(); a != 2 || f != 2 || bad != 0 {
		t.Fatalf("observer %d %d %d", a, f, bad)
	}
}

func TestServerUnknownKey(t *testing.T) {
	reg := registry(t, map[string]bulkhead.Settings{"check": {MaxConcurrent: 1}})
	for _, tt := range []struct {
		name     string
		opts     []Option
		wantCode codes.Code
	}{
		{name: "rejected", wantCode: codes.ResourceExhausted},
		{name: "allowed", opts: []Option{WithAllowUnknown()}, wantCode: codes.Unimplemented}, // reached the service
	} {
		t.Run(tt.name, func(t *testing.T) {
			client, _ := setup(t, serverOpts(reg, tt.opts...))
			_, err := client.List(context.Background(), &healthpb.HealthListRequest{})
			if status.Code(err) != tt.wantCode {
				t.Fatalf("err = %v", err)
			}
			if tt.wantCode == codes.ResourceExhausted && ReasonOf(err) != bulkhead.ReasonUnknownBulkhead {
				t.Fatalf("reason of %v", err)
			}
		})
	}
}

// TestServerStream: a stream holds its permit until the handler returns.
func TestServerStream(t *testing.T) {
	reg := registry(t, map[string]bulkhead.Settings{"watch": {MaxConcurrent: 1}})
	client, hs := setup(t, serverOpts(reg))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatal(err)
	}
	second, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Recv(); ReasonOf(err) != bulkhead.ReasonQueueFull {
		t.Fatalf("second stream: %v", err)
	}
	if in := reg.Get("watch").Snapshot().InUse; in != 1 {
		t.Fatalf("InUse = %d", in)
	}
	cancel()
	testkit.Eventually(t, "the stream's permit is back", func() bool { return reg.Get("watch").Snapshot().InUse == 0 })
	wait(t, hs.entered)
}

// TestServerDeadlineMargin: a waiter gives up before the call's deadline
// and answers RESOURCE_EXHAUSTED (timeout), not DEADLINE_EXCEEDED.
func TestServerDeadlineMargin(t *testing.T) {
	reg := registry(t, map[string]bulkhead.Settings{"check": {MaxConcurrent: 1, MaxQueue: 1}})
	client, hs := setup(t, serverOpts(reg, WithDeadlineMargin(4950*time.Millisecond)))
	first := async(func() error { _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); return err })
	wait(t, hs.entered)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted || ReasonOf(err) != bulkhead.ReasonTimeout || ctx.Err() != nil {
		t.Fatalf("err = %v (ctx %v)", err, ctx.Err())
	}
	hs.open()
	if err := wait(t, first); err != nil {
		t.Fatal(err)
	}
}

// TestServerPanic: the permit is released and the panic goes on.
func TestServerPanic(t *testing.T) {
	reg := registry(t, map[string]bulkhead.Settings{"check": {MaxConcurrent: 1}})
	obs := &observer{}
	icpt := UnaryServerInterceptor(reg, byMethod, WithObserver(obs))
	boom := errors.New("boom")
	func() {
		defer func() {
			if v := recover(); v != boom {
				t.Fatalf("recovered %v", v)
			}
		}()
		_, _ = icpt(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck},
			func(context.Context, any) (any, error) { panic(boom) })
	}()
	if in := reg.Get("check").Snapshot().InUse; in != 0 {
		t.Fatalf("InUse = %d", in)
	}
	if a, f, bad := obs.counts(); a != 1 || f != 1 || bad != 1 {
		t.Fatalf("observer %d %d %d", a, f, bad)
	}
}
