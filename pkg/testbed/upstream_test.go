package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testCtx is a context that ends with the test or after d.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func newTestUpstream(t *testing.T) *Upstream {
	t.Helper()
	u, err := NewUpstream("catalog", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	u.TrackServed()
	return u
}

type reply struct {
	status   int
	upstream string
	err      error
}

// getAll sends n concurrent GETs to url and returns a func that waits for
// their replies.
func getAll(ctx context.Context, t *testing.T, url string, n int) func() []reply {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	client := &http.Client{Transport: tr}
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				replies[i].err = err
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				replies[i].err = err
				return
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			replies[i] = reply{status: resp.StatusCode, upstream: resp.Header.Get("x-upstream")}
		})
	}
	return func() []reply {
		wg.Wait()
		tr.CloseIdleConnections()
		return replies
	}
}

func TestUpstreamMaxIsExactUnderHold(t *testing.T) {
	for _, n := range []int{1, 7, 64} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ctx := testCtx(t, 10*time.Second)
			u := newTestUpstream(t)
			u.Hold()
			wait := getAll(ctx, t, u.URL(), n)
			if err := u.WaitInflight(ctx, n); err != nil {
				t.Fatal(err)
			}
			if got := u.Max(); got != n {
				t.Errorf("Max() = %d while %d held, want %d", got, n, n)
			}
			if got := u.Inflight(); got != n {
				t.Errorf("Inflight() = %d, want %d", got, n)
			}
			u.ReleaseHeld()
			for _, r := range wait() {
				if r.err != nil || r.status != http.StatusOK || r.upstream != "catalog" {
					t.Errorf("reply = %+v, want 200 from catalog", r)
				}
			}
			if err := u.WaitIdle(ctx); err != nil {
				t.Fatal(err)
			}
			if u.Max() != n || u.MaxServed() != n || u.Served() != n || u.StatusCounts()[http.StatusOK] != int64(n) {
				t.Errorf("after release: max %d (served %d) served %d counts %v, want %d",
					u.Max(), u.MaxServed(), u.Served(), u.StatusCounts(), n)
			}
			u.ResetMax()
			if u.Max() != 0 || u.MaxServed() != 0 {
				t.Errorf("Max() after ResetMax when idle = %d (served %d), want 0", u.Max(), u.MaxServed())
			}
		})
	}
}

func TestUpstreamStatus(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	u := newTestUpstream(t)
	u.SetStatus(http.StatusInternalServerError)
	for _, r := range getAll(ctx, t, u.URL(), 3)() {
		if r.status != http.StatusInternalServerError {
			t.Errorf("status = %d (%v), want 500", r.status, r.err)
		}
	}
	if got := u.StatusCounts()[http.StatusInternalServerError]; got != 3 {
		t.Errorf("500s counted = %d, want 3", got)
	}
}

func TestUpstreamDelayHonoursClientAbort(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	u := newTestUpstream(t)
	u.SetDelay(time.Hour)
	reqCtx, cancel := context.WithCancel(ctx)
	wait := getAll(reqCtx, t, u.URL(), 2)
	if err := u.WaitInflight(ctx, 2); err != nil {
		t.Fatal(err)
	}
	cancel()
	for _, r := range wait() {
		if !errors.Is(r.err, context.Canceled) {
			t.Errorf("client error = %v, want context.Canceled", r.err)
		}
	}
	if err := u.WaitIdle(ctx); err != nil { // a 1h delay would time out here
		t.Fatal(err)
	}
	if u.Served() != 0 || u.Aborted() != 2 {
		t.Errorf("served %d aborted %d, want 0 and 2", u.Served(), u.Aborted())
	}
	// Aborted requests count in Max, not in MaxServed; a request served
	// after them does.
	u.SetDelay(0)
	for _, r := range getAll(ctx, t, u.URL(), 1)() {
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("reply = %+v, want 200", r)
		}
	}
	if u.Max() != 2 || u.MaxServed() != 1 {
		t.Errorf("max %d, max served %d; want 2 (the aborted pair) and 1", u.Max(), u.MaxServed())
	}
}

// MaxServed counts overlapping served requests, and only those: of a
// request answered while another is held, and of two answered one after
// the other.
func TestUpstreamMaxServedOverlap(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	u := newTestUpstream(t)
	u.Hold()
	held := getAll(ctx, t, u.URL(), 1)
	if err := u.WaitInflight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if u.MaxServed() != 0 {
		t.Errorf("max served %d with one request held, none answered; want 0", u.MaxServed())
	}
	u.ReleaseHeld()
	held()
	for range 2 {
		getAll(ctx, t, u.URL(), 1)()
	}
	if u.MaxServed() != 1 {
		t.Errorf("max served %d after three requests one at a time, want 1", u.MaxServed())
	}
	u.Hold()
	held = getAll(ctx, t, u.URL(), 1)
	if err := u.WaitInflight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	go func() {
		// The second request is held too (Hold applies to every request);
		// release both once it is in.
		if err := u.WaitInflight(ctx, 2); err == nil {
			u.ReleaseHeld()
		}
	}()
	getAll(ctx, t, u.URL(), 1)()
	held()
	if u.MaxServed() != 2 {
		t.Errorf("max served %d of two overlapping requests, want 2", u.MaxServed())
	}
}

func TestUpstreamWaitInflightHonoursCtx(t *testing.T) {
	u := newTestUpstream(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := u.WaitInflight(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitInflight on a cancelled ctx = %v, want context.Canceled", err)
	}
	if err := u.WaitInflight(ctx, 0); err != nil {
		t.Errorf("WaitInflight(0) = %v, want nil", err)
	}
}

func TestUpstreamCloseReleasesHeld(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	u := newTestUpstream(t)
	u.Hold()
	wait := getAll(ctx, t, u.URL(), 4)
	if err := u.WaitInflight(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if err := u.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if u.Inflight() != 0 {
		t.Errorf("Inflight() after Close = %d, want 0", u.Inflight())
	}
	_ = wait()
	if err := u.WaitInflight(ctx, 1); !errors.Is(err, ErrUpstreamClosed) {
		t.Errorf("WaitInflight after Close = %v, want ErrUpstreamClosed", err)
	}
	if err := u.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
}

func TestUpstreamPortInUse(t *testing.T) {
	u := newTestUpstream(t)
	if _, err := NewUpstream("auth", u.Addr()); err == nil {
		t.Fatal("NewUpstream on a bound port succeeded")
	}
}

func TestDelayRangePick(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name   string
		r      *delayRange
		lo, hi time.Duration
	}{
		{"unset", nil, 0, 0},
		{"zero", &delayRange{}, 0, 0},
		{"fixed", &delayRange{lo: 5 * ms, hi: 5 * ms}, 5 * ms, 5 * ms},
		{"range", &delayRange{lo: 5 * ms, hi: 20 * ms}, 5 * ms, 20 * ms},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for range 1000 {
				if d := tc.r.pick(); d < tc.lo || d > tc.hi {
					t.Fatalf("pick() = %v, want within [%v, %v]", d, tc.lo, tc.hi)
				}
			}
		})
	}
	u := newTestUpstream(t)
	u.SetDelayRange(3*ms, 1*ms) // hi < lo means lo
	if got := u.delay.Load().pick(); got != 3*ms {
		t.Errorf("SetDelayRange(3ms, 1ms) picks %v, want 3ms", got)
	}
}

func TestUpstreamHoldMidResponse(t *testing.T) {
	u, err := NewUpstream("mid", "")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.HoldMidResponse()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.URL(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || u.Inflight() != 1 {
		t.Fatalf("status %d in flight %d", resp.StatusCode, u.Inflight())
	}
	buf := make([]byte, len("partial "))
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "partial " {
		t.Fatalf("first chunk %q %v", buf, err)
	}
	cancel() // the client aborts mid-response
	resp.Body.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	if err := u.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	if u.Aborted() != 1 {
		t.Fatalf("aborted %d, want 1", u.Aborted())
	}
}

// Without TrackServed an upstream keeps no spans, and MaxServed says so.
func TestUpstreamMaxServedNeedsTracking(t *testing.T) {
	u, err := NewUpstream("catalog", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	defer func() {
		if recover() == nil {
			t.Error("MaxServed without TrackServed did not panic")
		}
	}()
	u.MaxServed()
}

// A request's own delay header wins over SetDelay, and its span is kept
// with its tag.
func TestUpstreamHeaderDelayAndSpans(t *testing.T) {
	u, err := NewUpstream("hd", "")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.TrackServed()
	u.SetDelay(time.Minute)
	req, _ := http.NewRequest(http.MethodGet, u.URL(), nil)
	req.Header.Set(HeaderDelay, "30ms")
	req.Header.Set(HeaderTag, "t1")
	before := u.Elapsed()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	spans := u.ServedSpans()
	if len(spans) != 1 || spans[0].Tag != "t1" || spans[0].Start < before || spans[0].End-spans[0].Start < 30*time.Millisecond || spans[0].End > u.Elapsed() {
		t.Fatalf("spans %v (asked at %v, now %v), want one of at least 30ms", spans, before, u.Elapsed())
	}
}
