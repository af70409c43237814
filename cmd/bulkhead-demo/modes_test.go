package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

func TestParseTrafficFlags(t *testing.T) {
	tests := []struct {
		args []string
		ok   bool
		want map[string]string // the parsed --control
	}{
		{nil, true, map[string]string{}},
		{[]string{"--control", "catalog=http://catalog:9080/,orders=http://orders:9080"}, true,
			map[string]string{"catalog": "http://catalog:9080", "orders": "http://orders:9080"}},
		{[]string{"--control", "nope=http://x:1"}, false, nil},
		{[]string{"--control", "catalog"}, false, nil},
		{[]string{"--control", "catalog=x:1"}, false, nil},
		{[]string{"--envoy", "envoy:10000"}, false, nil},
		{[]string{"--print-every", "100ms"}, false, nil},
		{[]string{"--drain-timeout", "-1s"}, false, nil},
		{[]string{"extra"}, false, nil},
	}
	for _, tc := range tests {
		o, err := parseTrafficFlags(tc.args, io.Discard)
		var usage *usageError
		switch {
		case tc.ok && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case !tc.ok && !errors.As(err, &usage):
			t.Errorf("%q: error %v, want a usage error", tc.args, err)
		case tc.ok && !reflect.DeepEqual(o.control, tc.want):
			t.Errorf("%q: control %v, want %v", tc.args, o.control, tc.want)
		}
	}
	if o, _ := parseTrafficFlags(nil, io.Discard); o.drainTimeout != defaultDrainTimeout || o.envoyURL != "http://127.0.0.1:10000" {
		t.Errorf("defaults %+v", o)
	}
	if _, err := parseTrafficFlags([]string{"--help"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp", err)
	}
}

func TestParseUpstreamFlags(t *testing.T) {
	tests := []struct {
		args []string
		want *upstreamOptions // nil: a usage error
	}{
		{[]string{"catalog"}, &upstreamOptions{name: "catalog", listen: "127.0.0.1:8081", control: "127.0.0.1:0"}},
		{[]string{"auth", "--listen", ":8082", "--control", ":9080"}, &upstreamOptions{name: "auth", listen: ":8082", control: ":9080"}},
		{[]string{"--listen", ":8083", "orders"}, &upstreamOptions{name: "orders", listen: ":8083", control: "127.0.0.1:0"}},
		{nil, nil},
		{[]string{"billing"}, nil},
		{[]string{"catalog", "auth"}, nil},
		{[]string{"catalog", "--nope"}, nil},
	}
	for _, tc := range tests {
		o, err := parseUpstreamFlags(tc.args, io.Discard)
		var usage *usageError
		switch {
		case tc.want == nil && !errors.As(err, &usage):
			t.Errorf("%q: error %v, want a usage error", tc.args, err)
		case tc.want != nil && (err != nil || o != *tc.want):
			t.Errorf("%q: %+v, %v; want %+v", tc.args, o, err, *tc.want)
		}
	}
}

// The control API round trip: a remote delay change reaches the upstream,
// a bad one is refused, and TakePeak reads and resets the peak.
func TestControlAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	u, err := testbed.NewUpstream("catalog", "")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	var logged atomic.Int32
	srv := httptest.NewServer(controlHandler(u, func(string, ...any) { logged.Add(1) }))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	r := newRemoteUpstream(srv.URL, client)

	if err := r.SetDelayRange(ctx, 150*time.Millisecond, 150*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	resp, err := client.Get(u.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if took := time.Since(begin); took < 150*time.Millisecond || logged.Load() != 1 {
		t.Errorf("a request took %v after the delay was set to 150ms (%d changes logged)", took, logged.Load())
	}
	if err := r.SetDelayRange(ctx, time.Second, time.Millisecond); err == nil {
		t.Error("hi < lo accepted")
	}
	if n, err := r.TakePeak(ctx); n != 1 || err != nil {
		t.Errorf("TakePeak = %d, %v; want 1", n, err)
	}
	if n, err := r.TakePeak(ctx); n != 0 || err != nil {
		t.Errorf("second TakePeak = %d, %v; want 0", n, err)
	}
	if _, err := newRemoteUpstream("http://127.0.0.1:1", client).TakePeak(ctx); err == nil {
		t.Error("TakePeak from a closed port succeeded")
	}
}

// The first signal ends ctx only; the second ends abort too.
func TestInterrupts(t *testing.T) {
	ctx, abort, release := interrupts(context.Background(), syscall.SIGUSR1)
	defer release()
	within := func(what string, done <-chan struct{}) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not end within 10s", what)
		}
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	within("ctx", ctx.Done())
	if abort.Err() != nil {
		t.Fatal("the first signal ended abort")
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	within("abort", abort.Done())
}
