package grpcbulkhead

import (
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func clientOpts(lim *bulkhead.Limiter, opts ...Option) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(UnaryClientInterceptor(lim, opts...)),
		grpc.WithChainStreamInterceptor(StreamClientInterceptor(lim, opts...)),
	}
}

// TestClientUnary: a rejected call fails locally, never reaching the server.
func TestClientUnary(t *testing.T) {
	lim, _ := bulkhead.New("health", bulkhead.Settings{MaxConcurrent: 1})
	obs := &observer{}
	client, hs := setup(t, nil, clientOpts(lim, WithObserver(obs))...)
	first := async(func() error { _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); return err })
	wait(t, hs.entered)

	_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	var re *RejectedError
	if !errors.Is(err, bulkhead.ErrQueueFull) || !errors.As(err, &re) || re.Bulkhead != "health" ||
		status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("err = %v", err)
	}
	if len(hs.entered) != 0 {
		t.Fatal("a rejected call reached the server")
	}
	hs.open()
	if err := wait(t, first); err != nil {
		t.Fatal(err)
	}
	if s := lim.Snapshot(); s.InUse != 0 || s.Released != 1 {
		t.Fatalf("snapshot %+v", s)
	}
	if a, f, bad := obs.counts(); a != 1 || f != 1 || bad != 0 {
		t.Fatalf("observer %d %d %d", a, f, bad)
	}
}

// TestClientStream: a stream holds its permit until it is read to the end
// or its context ends.
func TestClientStream(t *testing.T) {
	lim, _ := bulkhead.New("health", bulkhead.Settings{MaxConcurrent: 1})
	client, hs := setup(t, nil, clientOpts(lim)...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s1, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Recv(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{}); !errors.Is(err, bulkhead.ErrQueueFull) {
		t.Fatalf("second stream: %v", err)
	}
	cancel() // abandoned without reading to the end: the context ends it
	testkit.Eventually(t, "the cancelled stream's permit is back", func() bool { return lim.Snapshot().InUse == 0 })

	s2, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Recv(); err != nil {
		t.Fatal(err)
	}
	hs.open()
	if _, err := s2.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v", err)
	}
	if s := lim.Snapshot(); s.InUse != 0 || s.Released != 2 || s.DuplicateReleases != 0 {
		t.Fatalf("snapshot %+v", s)
	}
}

// fakeStream answers RecvMsg with err.
type fakeStream struct {
	grpc.ClientStream
	err error
}

func (f *fakeStream) RecvMsg(any) error { return f.err }

// TestClientStreamEnds: which RecvMsg results end a stream's hold.
func TestClientStreamEnds(t *testing.T) {
	tests := []struct {
		name          string
		serverStreams bool
		err           error
		wantHeld      bool
	}{
		{name: "message of a server stream", serverStreams: true, wantHeld: true},
		{name: "response of a client stream", serverStreams: false},
		{name: "end of a server stream", serverStreams: true, err: io.EOF},
		{name: "error", serverStreams: true, err: status.Error(codes.Unavailable, "gone")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, _ := bulkhead.New("dep", bulkhead.Settings{MaxConcurrent: 1})
			icpt := StreamClientInterceptor(lim)
			cs, err := icpt(context.Background(), &grpc.StreamDesc{ServerStreams: tt.serverStreams}, nil, "/m",
				func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
					return &fakeStream{err: tt.err}, nil
				})
			if err != nil {
				t.Fatal(err)
			}
			_ = cs.RecvMsg(nil)
			if held := lim.Snapshot().InUse == 1; held != tt.wantHeld {
				t.Fatalf("held = %v", held)
			}
		})
	}
}

// TestClientStreamCreationFails: a streamer error gives the permit back.
func TestClientStreamCreationFails(t *testing.T) {
	lim, _ := bulkhead.New("dep", bulkhead.Settings{MaxConcurrent: 1})
	_, err := StreamClientInterceptor(lim)(context.Background(), &grpc.StreamDesc{}, nil, "/m",
		func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			return nil, status.Error(codes.Unavailable, "down")
		})
	if status.Code(err) != codes.Unavailable || lim.Snapshot().InUse != 0 {
		t.Fatalf("err = %v, InUse %d", err, lim.Snapshot().InUse)
	}
}
