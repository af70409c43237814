package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/accesslog"
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

// watch is the StreamServerInfo of a stream sever leaves alone.
var watch = &grpc.StreamServerInfo{FullMethod: "/grpc.health.v1.Health/Watch"}

func TestStreams(t *testing.T) {
	s := newStreams()
	want := errors.New("handler result")
	if err := s.interceptor(nil, nil, watch, func(any, grpc.ServerStream) error { return want }); !errors.Is(err, want) {
		t.Fatalf("interceptor = %v, want the handler's result", err)
	}

	unblock := make(chan struct{})
	entered := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		res <- s.interceptor(nil, nil, watch, func(any, grpc.ServerStream) error {
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
	if err := s.interceptor(nil, nil, watch, func(any, grpc.ServerStream) error { called = true; return nil }); status.Code(err) != codes.Unavailable || called {
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

// blocked runs a streaming handler of method through s that blocks until
// unblock is closed, and returns its result's channel once it runs.
func blocked(s *streams, method string, unblock <-chan struct{}) <-chan error {
	entered := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		res <- s.interceptor(nil, nil, &grpc.StreamServerInfo{FullMethod: method}, func(any, grpc.ServerStream) error {
			close(entered)
			<-unblock
			return nil
		})
	}()
	<-entered
	return res
}

// sever ends the access-log streams running then, and only those.
func TestStreamsSever(t *testing.T) {
	s := newStreams()
	unblock := make(chan struct{})
	als := blocked(s, accesslog.StreamMethod, unblock)
	health := blocked(s, watch.FullMethod, unblock)
	s.sever()
	if err := <-als; status.Code(err) != codes.Unavailable {
		t.Fatalf("access-log stream after sever = %v, want Unavailable", err)
	}
	select {
	case err := <-health:
		t.Fatalf("a health watch ended by sever: %v", err)
	default:
	}
	later := blocked(s, accesslog.StreamMethod, unblock) // opened after: runs
	close(unblock)
	for _, ch := range []<-chan error{health, later} {
		if err := <-ch; err != nil {
			t.Fatalf("stream not severed = %v, want the handler's nil", err)
		}
	}
	s.wait()
}
