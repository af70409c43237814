//go:build e2e

package e2e

import (
	"context"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// Twins but for the queue: catalog FIFO, orders CoDel. Each upstream takes
// 50 ms, so a bulkhead of 4 serves 80 requests a second; a full FIFO queue
// of 40 is half a second of work, so its waiters reach max_wait.
const codelTwins = `
bulkheads:
  catalog: {max_concurrent: 4, max_queue: 40, max_wait: 300ms}
  orders:  {max_concurrent: 4, max_queue: 40, max_wait: 300ms, queue: codel, codel: {target: 10ms, interval: 50ms}}
`

// TestCoDelAgainstFIFO drives both queues with the same sustained 3x
// overload in one run and compares the admitted requests' wait p99 (the
// daemon's bulkhead_wait_seconds, Check arrival to grant): FIFO admits
// requests that waited near max_wait, CoDel near its target.
func TestCoDelAgainstFIFO(t *testing.T) {
	s := startStack(t, codelTwins, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{"catalog", "orders"} {
		s.up[name].SetDelay(50 * time.Millisecond)
	}
	const rate, d = 240.0, 3 * time.Second
	done := make(chan map[string]testbed.Stats, 1)
	go func() { done <- s.runLoads(ctx, rate, d, "/catalog", "/orders") }()
	// The sustained part: from half a second in (CoDel's first interval and
	// the queues' filling are over) to the end. A measurement point, not a
	// synchronisation.
	var warm *testbed.Metrics
	select {
	case <-time.After(500 * time.Millisecond):
		warm = s.metrics()
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	st := <-done
	s.waitGauge("bulkhead_active_calls", "catalog", 0, 5*time.Second)
	s.waitGauge("bulkhead_active_calls", "orders", 0, 5*time.Second)
	end := s.metrics()

	p99 := map[string]float64{}
	for _, dep := range []string{"catalog", "orders"} {
		p99[dep] = histogramQuantile(t, 0.99, end, warm, "bulkhead_wait_seconds", dep)
		t.Logf("%s: sent %d, 200 %d, 503 %d; admitted wait, sustained: p50 %.1fms p90 %.1fms p99 %.1fms; whole run: p99 %.1fms",
			dep, st["/"+dep].Sent, st["/"+dep].Count(200), st["/"+dep].Rejections,
			1000*histogramQuantile(t, 0.5, end, warm, "bulkhead_wait_seconds", dep),
			1000*histogramQuantile(t, 0.9, end, warm, "bulkhead_wait_seconds", dep), 1000*p99[dep],
			1000*histogramQuantile(t, 0.99, end, nil, "bulkhead_wait_seconds", dep))
	}
	if p99["catalog"] < 0.128 {
		t.Errorf("FIFO wait p99 %.3fs: the overload did not build a queue", p99["catalog"])
	}
	// CoDel keeps admitted waits within the target while overloaded.
	// Measured on a shared 2-core machine, raced daemon: sustained p50
	// 1.9-3 ms, p90 6-8 ms, p99 11-15 ms (target 10 ms), against FIFO's
	// ~300 ms (max_wait; the (256ms, 512ms] bucket reads 509 ms); once, with
	// the machine starved (half the throughput), one stalled Check made
	// CoDel's p99 (of 99 admitted) 411 ms. So the p90 is checked against
	// the target's bucket, the p99 only against FIFO's. Buckets double from
	// 1 ms: the estimates are coarse.
	p90 := histogramQuantile(t, 0.9, end, warm, "bulkhead_wait_seconds", "orders")
	if p90 > 0.016 || p99["orders"] >= p99["catalog"] {
		t.Errorf("CoDel wait p90 %.3fs, p99 %.3fs, against FIFO p99 %.3fs (target 10ms)", p90, p99["orders"], p99["catalog"])
	}
	// Dropping early leaves a permit idle now and then: measured 9% fewer
	// served than FIFO.
	if st["/orders"].OK() < st["/catalog"].OK()*8/10 {
		t.Errorf("CoDel served %d, FIFO %d: dropping early cost too much throughput", st["/orders"].OK(), st["/catalog"].OK())
	}
}

// histogramQuantile estimates the q quantile of the observations of the
// histogram name of dependency made between scrapes from (nil: the start)
// and to, from their cumulative buckets, interpolating linearly within a
// bucket as Prometheus's histogram_quantile does.
func histogramQuantile(t *testing.T, q float64, to, from *testbed.Metrics, name, dependency string) float64 {
	t.Helper()
	type bucket struct{ le, n float64 }
	var bs []bucket
	for _, smp := range to.Samples(name + "_bucket") {
		if smp.Labels["dependency"] != dependency {
			continue
		}
		le, err := strconv.ParseFloat(smp.Labels["le"], 64)
		if err != nil {
			t.Fatalf("%s le %q: %v", name, smp.Labels["le"], err)
		}
		n := smp.Value
		if from != nil {
			before, _ := from.Value(name+"_bucket", smp.Labels)
			n -= before
		}
		bs = append(bs, bucket{le, n})
	}
	slices.SortFunc(bs, func(a, b bucket) int { return int(math.Copysign(1, a.le-b.le)) })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		t.Fatalf("%s{dependency=%q}: no observations", name, dependency)
	}
	rank := q * bs[len(bs)-1].n
	lo, below := 0.0, 0.0
	for _, b := range bs {
		if b.n >= rank {
			if math.IsInf(b.le, 1) {
				return lo
			}
			return lo + (b.le-lo)*(rank-below)/(b.n-below)
		}
		lo, below = b.le, b.n
	}
	return lo
}
