package main

import (
	"context"
	"testing"
	"time"
)

// The load generator and the upstream, without Envoy: requests go straight
// to the upstream.

func startUpstream(t *testing.T, delay time.Duration) *upstream {
	t.Helper()
	u, err := newUpstream(delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := u.Close(); err != nil {
			t.Errorf("upstream: %v", err)
		}
	})
	return u
}

func TestConnRoundTrips(t *testing.T) {
	u := startUpstream(t, 0)
	h := newConn(u.Addr(), "/")
	defer h.close()
	for i := range 3 {
		status, err := h.do(t.Context())
		if err != nil || status != 200 {
			t.Fatalf("request %d: %d, %v", i, status, err)
		}
	}
	if served, _ := u.Stats(); served != 3 {
		t.Fatalf("upstream served %d, want 3 (one keep-alive connection)", served)
	}
}

func TestClosedLoop(t *testing.T) {
	u := startUpstream(t, 0)
	marks := 0
	s := runClosed(t.Context(), u.Addr(), 4, 50*time.Millisecond, 200*time.Millisecond, func(bool) { marks++ })
	if marks != 2 || s.Requests == 0 || s.Errors != 0 || s.NonOK != 0 {
		t.Fatalf("marks %d, stats %+v", marks, s)
	}
	if len(s.Latencies) == 0 || s.Window < 200*time.Millisecond {
		t.Fatalf("%d latencies over %v", len(s.Latencies), s.Window)
	}
}

// TestOpenLoopCorrectsCoordinatedOmission: one connection, a request due
// every 10 ms, an upstream that takes 25 ms. A closed loop would report
// 25 ms; the requests' wait for the connection counts too, so the latency
// measured from the intended send time grows through the run.
func TestOpenLoopCorrectsCoordinatedOmission(t *testing.T) {
	u := startUpstream(t, 25*time.Millisecond)
	s := runOpen(context.Background(), u.Addr(), 100, 1, 0, 300*time.Millisecond, 100*time.Millisecond, func(bool) {})
	if s.Errors != 0 || s.NonOK != 0 {
		t.Fatalf("stats %+v", s)
	}
	sum := summarize(s.Latencies)
	// 30 requests due in 300 ms; served at most one per 25 ms, so about 12
	// by the end of the window plus 4 during the grace; the rest censored.
	if sum.N != 30 || s.Censored == 0 {
		t.Fatalf("%d latencies, %d censored; want 30 in all, some censored", sum.N, s.Censored)
	}
	if sum.MaxMs < 100 || sum.P50Ms < 50 {
		t.Fatalf("latency %+v: want the queueing behind the slow upstream counted", sum)
	}
	lag := summarize(s.SendLag)
	if lag.MaxMs < 50 {
		t.Fatalf("send lag %+v: the schedule slipped, the lag must show it", lag)
	}
}

func TestOpenLoopOnSchedule(t *testing.T) {
	u := startUpstream(t, 0)
	s := runOpen(t.Context(), u.Addr(), 200, 4, 50*time.Millisecond, 250*time.Millisecond, time.Second, func(bool) {})
	if s.Errors != 0 || s.NonOK != 0 || s.Censored != 0 {
		t.Fatalf("stats %+v", s)
	}
	if n := len(s.Latencies); n != 50 {
		t.Fatalf("%d requests measured, want the 50 due in the window", n)
	}
}
