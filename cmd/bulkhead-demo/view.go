package main

import (
	"context"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// reasons are the rejection reasons, in display order.
var reasons = []string{"queue_full", "shed", "timeout", "unknown_bulkhead", "circuit_open"}

// bulkheadRow is the daemon's view of one bulkhead: gauges now, counter
// rates over the last scrape interval.
type bulkheadRow struct {
	known                 bool // the daemon exports this bulkhead
	rates                 bool // a previous scrape gives the rates
	limit, active, queued float64
	admitted, rejected    float64 // per second
	rejectedBy            map[string]float64
	// shares: the bulkhead hands its Envoys shares now (mode auto far from
	// the limit): their circuit breakers admit, no Check reaches the daemon,
	// and active counts the permits the shares hold.
	shares bool
}

// view holds what the live table and the summary show.
type view struct {
	prev, cur     *testbed.Metrics
	prevAt, curAt time.Time
	scrapeErr     error
	rows          map[string]bulkheadRow
	// peak is each upstream's most requests in flight over the last
	// window, -1 when unknown; runPeak over the whole run, for the
	// upstreams whose peak was known at least once.
	peak    map[string]int
	runPeak map[string]int
}

func newView() view {
	return view{rows: map[string]bulkheadRow{}, peak: map[string]int{}, runPeak: map[string]int{}}
}

const scrapeTimeout = 800 * time.Millisecond

// update scrapes the daemon, takes every flow's window and every upstream's
// peak, and recomputes the rows.
func (v *view) update(ctx context.Context, d *demo) {
	v.scrape(ctx, d)
	for _, f := range d.flows {
		f.window = f.load.TakeWindow()
	}
	v.takePeaks(ctx, d)
	for _, r := range demoRoutes {
		v.rows[r.name] = v.row(r.name)
	}
}

// final takes the last scrape and peaks for the summary.
func (v *view) final(d *demo) {
	v.scrape(context.Background(), d)
	v.takePeaks(context.Background(), d)
}

// takePeaks takes every upstream's peak since the previous call.
func (v *view) takePeaks(ctx context.Context, d *demo) {
	for _, r := range demoRoutes {
		v.peak[r.name] = -1
		u, ok := d.upstreams[r.name]
		if !ok {
			continue
		}
		peakCtx, cancel := context.WithTimeout(ctx, controlTimeout)
		n, err := u.TakePeak(peakCtx)
		cancel()
		if err != nil {
			continue
		}
		v.peak[r.name] = n
		v.runPeak[r.name] = max(v.runPeak[r.name], n)
	}
}

func (v *view) scrape(ctx context.Context, d *demo) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	m, err := testbed.Scrape(ctx, d.metricsURL)
	v.scrapeErr = err
	if err != nil {
		return
	}
	v.prev, v.prevAt = v.cur, v.curAt
	v.cur, v.curAt = m, time.Now()
}

func (v *view) row(name string) bulkheadRow {
	if v.cur == nil {
		return bulkheadRow{}
	}
	dep := map[string]string{"dependency": name}
	limit, known := v.cur.Value("bulkhead_limit", dep)
	r := bulkheadRow{
		known:      known,
		limit:      limit,
		active:     v.cur.Sum("bulkhead_active_calls", dep),
		queued:     v.cur.Sum("bulkhead_queued_calls", dep),
		rejectedBy: map[string]float64{},
		shares:     v.cur.Sum("bulkhead_shares_mode", dep) == 1,
	}
	if v.prev == nil {
		return r
	}
	r.rates = true
	secs := v.curAt.Sub(v.prevAt).Seconds()
	rate := func(metric string, labels map[string]string) float64 {
		delta := v.cur.Sum(metric, labels) - v.prev.Sum(metric, labels)
		if delta < 0 || secs <= 0 { // the daemon restarted
			return 0
		}
		return delta / secs
	}
	r.admitted = rate("bulkhead_admitted_total", dep)
	for _, reason := range reasons {
		if x := rate("bulkhead_rejected_total", map[string]string{"dependency": name, "reason": reason}); x > 0 {
			r.rejectedBy[reason] = x
			r.rejected += x
		}
	}
	return r
}

// totals returns the daemon's counters for the summary.
func (v *view) totals(name string) (admitted map[string]float64, rejected map[string]float64) {
	admitted, rejected = map[string]float64{}, map[string]float64{}
	if v.cur == nil {
		return admitted, rejected
	}
	for _, s := range v.cur.Samples("bulkhead_admitted_total") {
		if s.Labels["dependency"] == name {
			admitted[s.Labels["priority"]] += s.Value
		}
	}
	for _, s := range v.cur.Samples("bulkhead_rejected_total") {
		if s.Labels["dependency"] == name {
			rejected[s.Labels["reason"]] += s.Value
		}
	}
	return admitted, rejected
}
