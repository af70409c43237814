package admin_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/admin/admintest"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// Shutdown ends open watch streams (gRPC and JSON) at once instead of
// waiting out the shutdown timeout for them.
func TestServeShutdownEndsWatches(t *testing.T) {
	f := newFixture(t, nil, admin.WithShutdownTimeout(time.Minute))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.srv.Serve(ctx, ln, nil) }()

	gs, err := dial(t, addr).WatchBulkheads(testCtx(t), &adminv1.WatchBulkheadsRequest{Interval: nil})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gs.Recv(); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(testCtx(t), "GET", "http://"+addr+"/v1/bulkheads:watch", nil)
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatal("no first line")
	}
	testkit.Eventually(t, "two watchers", func() bool { return f.srv.Watchers() == 2 })

	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("shutdown took %s: the watches held it up", d)
	}
	var last string
	for sc.Scan() { // bounded by the closed stream
		last = sc.Text()
	}
	if !strings.Contains(last, `"error":"the admin server is shutting down"`) {
		t.Errorf("last JSON line %q", last)
	}
	for i := 0; i < 100; i++ {
		if _, err = gs.Recv(); err != nil {
			break
		}
	}
	if c := status.Code(err); c != codes.Unavailable {
		t.Errorf("gRPC watch after shutdown: %v", err)
	}
}

func TestServeListenerError(t *testing.T) {
	f := newFixture(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if err := f.srv.Serve(context.Background(), ln, nil); err == nil {
		t.Fatal("Serve on a closed listener returned nil")
	}
}

// The JSON API answers over cleartext HTTP/2 too, on the listener gRPC uses.
func TestJSONOverH2C(t *testing.T) {
	f := newFixture(t, nil)
	addr := admintest.Start(t, f.srv)
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: p}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(testCtx(t), "GET", "http://"+addr+"/v1/bulkheads/auth", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("%s %d", resp.Proto, resp.StatusCode)
	}
}
