package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestInflight(t *testing.T) {
	f := newInflight()
	f.wait(context.Background()) // idle: returns at once

	release := make(chan struct{})
	entered := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		_, err := f.interceptor(context.Background(), nil, nil, func(context.Context, any) (any, error) {
			close(entered)
			<-release
			return nil, errors.New("done")
		})
		res <- err
	}()
	<-entered

	// Busy: wait ends with its context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.wait(ctx)

	waited := make(chan struct{})
	go func() { f.wait(context.Background()); close(waited) }()
	select {
	case <-waited:
		t.Fatal("wait returned while a call was in flight")
	default:
	}
	close(release)
	if err := <-res; err == nil || err.Error() != "done" {
		t.Fatalf("interceptor returned %v, want the handler's error", err)
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return after the call ended")
	}
	f.wait(context.Background())
}

func TestStreams(t *testing.T) {
	s := newStreams()
	want := errors.New("handler result")
	if err := s.interceptor(nil, nil, nil, func(any, grpc.ServerStream) error { return want }); !errors.Is(err, want) {
		t.Fatalf("interceptor = %v, want the handler's result", err)
	}

	unblock := make(chan struct{})
	entered := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		res <- s.interceptor(nil, nil, nil, func(any, grpc.ServerStream) error {
			close(entered)
			<-unblock // a Recv blocked until gRPC cancels the stream
			return nil
		})
	}()
	<-entered
	s.stop()
	s.stop() // idempotent
	if err := <-res; status.Code(err) != codes.Unavailable {
		t.Fatalf("running stream after stop = %v, want Unavailable", err)
	}
	called := false
	if err := s.interceptor(nil, nil, nil, func(any, grpc.ServerStream) error { called = true; return nil }); status.Code(err) != codes.Unavailable || called {
		t.Fatalf("new stream after stop = %v (handler called %v), want Unavailable without the handler", err, called)
	}

	waited := make(chan struct{})
	go func() { s.wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("wait returned while a handler still ran")
	default:
	}
	close(unblock)
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return after the handler did")
	}
}
