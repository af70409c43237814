package testbed

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// eventually polls cond every millisecond until it holds or d has passed.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}

// runInBackground runs l in a goroutine and sends Run's result on the
// returned channel; the test receives it, which waits for the goroutine.
func runInBackground(ctx context.Context, l *Load) <-chan Stats {
	done := make(chan Stats, 1)
	go func() {
		s, _ := l.Run(ctx)
		done <- s
	}()
	return done
}

func runLoad(t *testing.T, ctx context.Context, spec LoadSpec) Stats {
	t.Helper()
	l, err := NewLoad(spec)
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLoadSpecValidation(t *testing.T) {
	good := LoadSpec{URL: "http://127.0.0.1:1/", Rate: 1, MaxRequests: 1, MaxOutstanding: 1}
	tests := []struct {
		name   string
		modify func(*LoadSpec)
		ok     bool
	}{
		{"good", func(*LoadSpec) {}, true},
		{"no url", func(s *LoadSpec) { s.URL = "" }, false},
		{"zero rate", func(s *LoadSpec) { s.Rate = 0 }, false},
		{"zero count", func(s *LoadSpec) { s.MaxRequests = 0 }, false},
		{"zero outstanding", func(s *LoadSpec) { s.MaxOutstanding = 0 }, false},
		{"negative duration", func(s *LoadSpec) { s.Duration = -1 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := good
			tc.modify(&spec)
			_, err := NewLoad(spec)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrLoadSpec)) {
				t.Errorf("NewLoad() error = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestLoadCountCap(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	u := newTestUpstream(t)
	s := runLoad(t, ctx, LoadSpec{
		URL: u.URL(), Rate: 1000, Duration: time.Minute, MaxRequests: 50, MaxOutstanding: 100,
	})
	if s.Sent != 50 || s.NotSent != 0 || s.OK() != 50 || u.Served() != 50 {
		t.Errorf("sent %d not sent %d ok %d served %d, want 50/0/50/50", s.Sent, s.NotSent, s.OK(), u.Served())
	}
	if len(s.Latencies) != 50 || s.P50() <= 0 || s.P99() < s.P50() || s.Max() < s.P99() {
		t.Errorf("latencies: n=%d p50 %v p99 %v max %v", len(s.Latencies), s.P50(), s.P99(), s.Max())
	}
	// The 50th request is due 49 ms after the first.
	if s.Elapsed < 49*time.Millisecond || s.Elapsed > 10*time.Second {
		t.Errorf("elapsed %v, want about 50ms", s.Elapsed)
	}
}

func TestLoadDurationCapAndRate(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	u := newTestUpstream(t)
	s := runLoad(t, ctx, LoadSpec{
		URL: u.URL(), Rate: 100, Duration: 500 * time.Millisecond, MaxRequests: 10000, MaxOutstanding: 100,
	})
	// Due at 0, 10ms, ... 490ms: exactly 50, whatever the machine's speed.
	if s.Sent+s.NotSent != 50 || s.Sent < 45 {
		t.Errorf("sent %d not sent %d, want 50 due and nearly all sent", s.Sent, s.NotSent)
	}
	// Open loop: the schedule cannot finish early, and a rate of 100/s takes
	// about half a second for 50 requests.
	if s.Elapsed < 490*time.Millisecond || s.Elapsed > 5*time.Second {
		t.Errorf("elapsed %v, want about 500ms", s.Elapsed)
	}
}

func TestLoadOutstandingCap(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	u := newTestUpstream(t)
	u.Hold()
	l, err := NewLoad(LoadSpec{URL: u.URL(), Rate: 1000, MaxRequests: 40, MaxOutstanding: 5})
	if err != nil {
		t.Fatal(err)
	}
	done := runInBackground(ctx, l)
	if err := u.WaitInflight(ctx, 5); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the schedule to end", func() bool {
		s := l.Snapshot()
		return s.Sent+s.NotSent == 40
	})
	if s := l.Snapshot(); s.Outstanding != 5 {
		t.Errorf("outstanding while held = %d, want 5", s.Outstanding)
	}
	u.ReleaseHeld()
	s := <-done
	if s.Sent != 5 || s.NotSent != 35 || s.OK() != 5 || u.Max() != 5 || s.Outstanding != 0 {
		t.Errorf("sent %d not sent %d ok %d upstream max %d outstanding %d, want 5/35/5/5/0",
			s.Sent, s.NotSent, s.OK(), u.Max(), s.Outstanding)
	}
}

func TestLoadCancelEndsOutstanding(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	u := newTestUpstream(t)
	u.Hold()
	l, err := NewLoad(LoadSpec{URL: u.URL(), Rate: 1000, MaxRequests: 10, MaxOutstanding: 10})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := runInBackground(runCtx, l)
	if err := u.WaitInflight(ctx, 10); err != nil {
		t.Fatal(err)
	}
	cancel()
	s := <-done
	if s.Cancelled != 10 || s.TransportErrors != 0 || s.Responses() != 0 {
		t.Errorf("cancelled %d transport errors %d responses %d, want 10/0/0", s.Cancelled, s.TransportErrors, s.Responses())
	}
	if err := u.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Run(ctx); !errors.Is(err, ErrLoadReused) {
		t.Errorf("second Run() = %v, want ErrLoadReused", err)
	}
}

// Stop sends nothing more and lets the requests out finish: they are
// answered, not cancelled.
func TestLoadStopLetsOutstandingFinish(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	u := newTestUpstream(t)
	u.Hold()
	l, err := NewLoad(LoadSpec{URL: u.URL(), Rate: 1000, MaxRequests: 5000, MaxOutstanding: 100})
	if err != nil {
		t.Fatal(err)
	}
	done := runInBackground(ctx, l)
	if err := u.WaitInflight(ctx, 10); err != nil {
		t.Fatal(err)
	}
	out := l.Stop()
	if again := l.Stop(); again != out {
		t.Errorf("second Stop() = %d, want %d (nothing finished while held)", again, out)
	}
	if s := l.Snapshot(); out < 10 || s.Sent != out || s.Outstanding != out {
		t.Errorf("Stop() = %d, snapshot sent %d outstanding %d: want them equal and >= 10", out, s.Sent, s.Outstanding)
	}
	u.ReleaseHeld()
	s := <-done
	if s.Sent != out || s.OK() != out || s.Cancelled != 0 || s.TransportErrors != 0 || u.Served() != out {
		t.Errorf("after Stop: sent %d ok %d cancelled %d transport errors %d upstream served %d, want %d/%d/0/0/%d",
			s.Sent, s.OK(), s.Cancelled, s.TransportErrors, u.Served(), out, out, out)
	}

	early, err := NewLoad(LoadSpec{URL: u.URL(), Rate: 1000, MaxRequests: 10, MaxOutstanding: 10})
	if err != nil {
		t.Fatal(err)
	}
	if n := early.Stop(); n != 0 {
		t.Errorf("Stop() before Run = %d, want 0", n)
	}
	if s, _ := early.Run(ctx); s.Sent != 0 || s.NotSent != 0 {
		t.Errorf("Run after Stop sent %d (not sent %d), want nothing", s.Sent, s.NotSent)
	}
}

func TestLoadTransportErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	_ = ln.Close()
	s := runLoad(t, testCtx(t, 20*time.Second), LoadSpec{URL: url, Rate: 1000, MaxRequests: 5, MaxOutstanding: 5})
	if s.TransportErrors != 5 || s.Errors() != 5 || len(s.Latencies) != 0 {
		t.Errorf("transport errors %d errors %d latencies %d, want 5/5/0", s.TransportErrors, s.Errors(), len(s.Latencies))
	}
}

// TestLoadHeadersAndRejections checks the request header and the accounting
// of 503s with and without the bulkhead's headers.
func TestLoadHeadersAndRejections(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("x-bulkhead-priority") {
		case "critical":
			w.WriteHeader(http.StatusOK)
		case "best_effort":
			w.Header().Set("retry-after", "1")
			w.Header().Set("x-bulkhead-reason", "shed")
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.Header().Set("x-bulkhead-reason", "queue_full") // no retry-after
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	tests := []struct {
		priority            string
		status              int
		reason              string
		wellFormed          bool
		rejections, invalid int
	}{
		{"critical", 200, "", true, 0, 0},
		{"best_effort", 503, "shed", true, 4, 0},
		{"normal", 503, "queue_full", false, 4, 4},
	}
	for _, tc := range tests {
		t.Run(tc.priority, func(t *testing.T) {
			s := runLoad(t, testCtx(t, 20*time.Second), LoadSpec{
				URL: srv.URL, Rate: 1000, MaxRequests: 4, MaxOutstanding: 4,
				Header: http.Header{"X-Bulkhead-Priority": {tc.priority}},
			})
			if s.Count(tc.status) != 4 || (tc.reason != "" && s.ByReason[tc.reason] != 4) {
				t.Errorf("statuses %v reasons %v, want 4 x %d %q", s.ByStatus, s.ByReason, tc.status, tc.reason)
			}
			if s.RejectionsWellFormed() != tc.wellFormed || s.Rejections != tc.rejections || s.MalformedRejections != tc.invalid {
				t.Errorf("rejections %d malformed %d, want %d and %d", s.Rejections, s.MalformedRejections, tc.rejections, tc.invalid)
			}
		})
	}
	srv.Client().CloseIdleConnections()
}

func TestLoadWindows(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	u := newTestUpstream(t)
	l, err := NewLoad(LoadSpec{URL: u.URL(), Rate: 1000, MaxRequests: 20, MaxOutstanding: 20, MaxSamples: 5})
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Latencies) != 5 {
		t.Errorf("kept %d latencies, want MaxSamples=5", len(s.Latencies))
	}
	w := l.TakeWindow()
	if w.Sent != 20 || w.OK() != 20 || len(w.Latencies) != 5 {
		t.Errorf("first window: sent %d ok %d latencies %d, want 20/20/5", w.Sent, w.OK(), len(w.Latencies))
	}
	if w := l.TakeWindow(); w.Sent != 0 || w.Responses() != 0 || len(w.Latencies) != 0 {
		t.Errorf("second window not empty: %+v", w)
	}
	if snap := l.Snapshot(); snap.Sent != 20 || snap.OK() != 20 {
		t.Errorf("snapshot: %+v", snap)
	}
}

func TestStatsQuantile(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var hundred []time.Duration
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, ms(i))
	}
	tests := []struct {
		name      string
		latencies []time.Duration
		q         float64
		want      time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", []time.Duration{ms(7)}, 0.99, ms(7)},
		{"p50", hundred, 0.5, ms(50)},
		{"p99", hundred, 0.99, ms(99)},
		{"max", hundred, 1, ms(100)},
		{"min", hundred, 0, ms(1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := (Stats{Latencies: tc.latencies}).Quantile(tc.q); got != tc.want {
				t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
	m := MergeStats(Stats{Sent: 1, ByStatus: map[int]int{200: 1}, Latencies: []time.Duration{ms(1)}},
		Stats{Sent: 2, ByStatus: map[int]int{200: 1, 503: 1}, ByReason: map[string]int{"shed": 1}, Latencies: []time.Duration{ms(3)}})
	if m.Sent != 3 || m.OK() != 2 || m.Count(503) != 1 || m.ByReason["shed"] != 1 || m.Max() != ms(3) {
		t.Errorf("MergeStats = %+v", m)
	}
}
