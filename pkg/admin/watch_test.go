package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/admin/admintest"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

func TestWatchGRPC(t *testing.T) {
	clk := clock.NewFake(t0)
	f := newFixture(t, nil, admin.WithClock(clk))
	c := dial(t, admintest.Start(t, f.srv))
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()

	stream, err := c.WatchBulkheads(ctx, &adminv1.WatchBulkheadsRequest{Interval: durationpb.New(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatalf("first: %v", err)
	}
	if len(first.GetBulkheads()) != 2 || !first.GetTime().AsTime().Equal(t0) {
		t.Fatalf("first: %v", first)
	}
	testkit.Eventually(t, "the watch to wait for its interval", func() bool { return clk.Timers() == 1 })
	f.fake.Mutate("catalog", func(st *admin.Status) { st.Snapshot.InUse = 5 })
	clk.Advance(2 * time.Second)
	second, err := stream.Recv()
	if err != nil {
		t.Fatalf("second: %v", err)
	}
	if got := second.GetBulkheads()[1].GetInUse(); got != 5 || !second.GetTime().AsTime().Equal(t0.Add(2*time.Second)) {
		t.Errorf("second: in use %d at %v", got, second.GetTime().AsTime())
	}

	cancel() // the client goes away: the server's loop must end
	testkit.Eventually(t, "the watch stream to end on the server", func() bool { return f.srv.Watchers() == 0 })
}

func TestWatchJSON(t *testing.T) {
	clk := clock.NewFake(t0)
	f := newFixture(t, nil, admin.WithClock(clk))
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()

	req, _ := http.NewRequestWithContext(testCtx(t), "GET", ts.URL+"/v1/bulkheads:watch?interval=100ms", nil)
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(resp.Body)
	type line struct {
		Time      time.Time    `json:"time"`
		Bulkheads []admin.View `json:"bulkheads"`
	}
	next := func() line {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("stream ended: %v", lines.Err())
		}
		var l line
		if err := json.Unmarshal(lines.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", lines.Text(), err)
		}
		return l
	}
	if l := next(); len(l.Bulkheads) != 2 || l.Bulkheads[1].Settings.MaxWait != "500ms" {
		t.Fatalf("first line: %+v", l)
	}
	testkit.Eventually(t, "the watch to wait for its interval", func() bool { return clk.Timers() == 1 })
	clk.Advance(100 * time.Millisecond)
	if l := next(); !l.Time.Equal(t0.Add(100 * time.Millisecond)) {
		t.Fatalf("second line at %v", l.Time)
	}
	resp.Body.Close() // the client goes away
	testkit.Eventually(t, "the watch stream to end on the server", func() bool { return f.srv.Watchers() == 0 })
}

func TestWatchEndsOnStop(t *testing.T) {
	f := newFixture(t, nil)
	c := dial(t, admintest.Start(t, f.srv))
	stream, err := c.WatchBulkheads(testCtx(t), &adminv1.WatchBulkheadsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	f.srv.Stop()
	for i := 0; i < 100; i++ { // bounded: at most a few more snapshots
		if _, err = stream.Recv(); err != nil {
			break
		}
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("after Stop: %v, want Unavailable", err)
	}
}

func TestWatchLimit(t *testing.T) {
	f := newFixture(t, nil, admin.WithMaxWatchers(1))
	addr := admintest.Start(t, f.srv)
	c := dial(t, addr)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	first, err := c.WatchBulkheads(ctx, &adminv1.WatchBulkheadsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatal(err)
	}
	second, err := c.WatchBulkheads(ctx, &adminv1.WatchBulkheadsRequest{})
	if err == nil {
		_, err = second.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second watch: %v, want ResourceExhausted", err)
	}
	r := do(t, http.DefaultClient, "GET", "http://"+addr+"/v1/bulkheads:watch", "", nil)
	if r.code != http.StatusTooManyRequests {
		t.Fatalf("JSON watch: %d %s, want 429", r.code, r.raw)
	}
	http.DefaultClient.CloseIdleConnections()
}
