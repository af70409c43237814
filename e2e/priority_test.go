//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

func prio(p string) map[string]string { return map[string]string{"x-bulkhead-priority": p} }

// Scenario 3: with catalog saturated, critical requests still get through
// the reserve, and best_effort is shed first.
func TestPriority(t *testing.T) {
	s := startStack(t, `
authz: {trusted_priority_sources: ["127.0.0.0/8"]}
bulkheads:
  catalog: {max_concurrent: 10, max_queue: 3, max_wait: 4s, reserve: {critical: 0.2, normal: 0.1}}
`, func(p *envoy.Params) { p.ExtAuthzTimeout = 6 * time.Second })
	priorityScenario(t, s, func() []*testbed.Metrics { return []*testbed.Metrics{s.metrics()} })
}

// priorityScenario fills s's catalog (limit 10, queue 3, reserves 0.2 and
// 0.1) class by class and checks ceilings, queue order and shedding;
// scrape returns the metrics of every daemon (their counters add up).
func priorityScenario(t *testing.T, s *stack, scrape func() []*testbed.Metrics) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	up := s.up["catalog"]
	up.Hold()
	waitInflight := func(n int) {
		t.Helper()
		if err := up.WaitInflight(ctx, n); err != nil {
			t.Fatalf("upstream in flight never reached %d: %v", n, err)
		}
	}
	waitQueued := func(n float64) {
		t.Helper()
		s.waitGauge("bulkhead_queued_calls", "catalog", n, 5*time.Second)
	}
	var pending []<-chan response
	send := func(p string) <-chan response {
		ch := s.getAsync(ctx, "/catalog", prio(p))
		pending = append(pending, ch)
		return ch
	}

	// best_effort may use 10 - ceil(0.3*10) = 7 permits.
	for range 7 {
		send("best_effort")
	}
	waitInflight(7)
	beWaiter := send("best_effort") // over its ceiling: waits
	waitQueued(1)
	send("normal") // normal's ceiling is 8: admitted past the best_effort waiter
	waitInflight(8)
	send("normal") // at normal's ceiling: waits
	waitQueued(2)
	send("critical") // critical uses the reserve
	send("critical")
	waitInflight(10)
	critWaiter := send("critical") // limit reached: waits, queue now full (3)
	waitQueued(3)

	// A normal arrival finds the queue full: it sheds the youngest
	// best_effort waiter, not a critical or normal one.
	send("normal")
	select {
	case r := <-beWaiter:
		if r.status != 503 || r.header.Get("x-bulkhead-reason") != "shed" {
			t.Fatalf("shed best_effort waiter got %d %q", r.status, r.header.Get("x-bulkhead-reason"))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("best_effort waiter was not shed")
	}
	waitQueued(3)
	// A best_effort arrival now has nobody lower to shed.
	if r := s.get(ctx, "/catalog", prio("best_effort")); r.status != 503 || r.header.Get("x-bulkhead-reason") != "queue_full" {
		t.Fatalf("best_effort on a full queue got %d %q", r.status, r.header.Get("x-bulkhead-reason"))
	}
	if up.Inflight() != 10 || up.Max() != 10 {
		t.Fatalf("upstream in flight %d max %d, want 10", up.Inflight(), up.Max())
	}

	up.ReleaseHeld()
	ok := 0
	for _, ch := range pending {
		if ch == beWaiter {
			continue // already received: it was shed
		}
		select {
		case r := <-ch:
			if r.err == nil && r.status == 200 {
				ok++
			}
			if ch == critWaiter && r.status != 200 {
				t.Errorf("queued critical request got %d", r.status)
			}
		case <-ctx.Done():
			t.Fatal("requests did not finish")
		}
	}
	if ok != len(pending)-1 {
		t.Errorf("%d of %d requests succeeded, want all but the shed one", ok, len(pending))
	}
	ms := scrape()
	sum := func(name string, labels map[string]string) float64 {
		v := 0.0
		for _, m := range ms {
			v += m.Sum(name, labels)
		}
		return v
	}
	for _, c := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"dependency": "catalog", "priority": "critical"}, 3},
		{map[string]string{"dependency": "catalog", "priority": "normal"}, 3},
		{map[string]string{"dependency": "catalog", "priority": "best_effort"}, 7},
	} {
		if got := sum("bulkhead_admitted_total", c.labels); got != c.want {
			t.Errorf("admitted %v = %v, want %v", c.labels, got, c.want)
		}
	}
	if got := sum("bulkhead_rejected_total", map[string]string{"dependency": "catalog", "reason": "shed"}); got != 1 {
		t.Errorf("shed rejections %v, want 1", got)
	}
}
