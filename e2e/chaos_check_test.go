//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// chaosOutcome is one request of the chaos load, timed on the upstream's
// clock.
type chaosOutcome struct {
	class      int // 0 critical, 1 normal, 2 best_effort
	tenant     string
	sent, done time.Duration
	status     int // 0: no answer
	reason     string
}

// dur draws a duration in [0, d) from rng.
func dur(rng *rand.Rand, d time.Duration) time.Duration { return time.Duration(rng.Int64N(int64(d))) }

var classNames = [3]string{"critical", "normal", "best_effort"}

// chaosLoad sends requests to url at rate for d, at most 100 outstanding:
// a fifth critical, half normal, the rest best_effort, from three tenants;
// seven in ten short (20-200 ms), the rest 1-5 s (longer than a lease).
func chaosLoad(ctx context.Context, up *testbed.Upstream, url string, seed uint64, rate float64, d time.Duration) []chaosOutcome {
	rng := rand.New(rand.NewPCG(seed, 0x6c6f6164))
	tr := &http.Transport{MaxIdleConnsPerHost: 100}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var (
		mu  sync.Mutex
		out []chaosOutcome
		wg  sync.WaitGroup
	)
	slots := make(chan struct{}, 100)
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	end := time.NewTimer(d)
	defer end.Stop()
	for {
		select {
		case <-ctx.Done():
		case <-end.C:
		case <-tick.C:
			select {
			case slots <- struct{}{}:
			default:
				continue // as many out as the bound allows: skip this one
			}
			class := 2
			switch p := rng.Float64(); {
			case p < 0.2:
				class = 0
			case p < 0.7:
				class = 1
			}
			delay := 20*time.Millisecond + dur(rng, 180*time.Millisecond)
			if rng.Float64() < 0.3 {
				delay = time.Second + dur(rng, 4*time.Second)
			}
			tenant := fmt.Sprint("t", rng.IntN(3))
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				o := chaosOutcome{class: class, tenant: tenant, sent: up.Elapsed()}
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if err == nil {
					req.Header.Set("x-bulkhead-priority", classNames[class])
					req.Header.Set("x-tenant", tenant)
					req.Header.Set(testbed.HeaderDelay, delay.String())
					req.Header.Set(testbed.HeaderTag, tenant)
					var resp *http.Response
					if resp, err = client.Do(req); err == nil {
						o.status, o.reason = resp.StatusCode, resp.Header.Get(authz.HeaderReason)
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
				o.done = up.Elapsed()
				mu.Lock()
				out = append(out, o)
				mu.Unlock()
			}()
			continue
		}
		break
	}
	wg.Wait()
	return out
}

// concurrency is the upstream's served requests at once over time: a step
// function, at[i] the time from which n[i] hold.
type concurrency struct {
	at []time.Duration
	n  []int
}

func concurrencyOf(spans []testbed.Span) concurrency {
	type event struct {
		at    time.Duration
		delta int
	}
	events := make([]event, 0, 2*len(spans))
	for _, s := range spans {
		events = append(events, event{s.Start, 1}, event{s.End, -1})
	}
	// At equal times an end before a start: touching spans do not overlap.
	slices.SortFunc(events, func(a, b event) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.delta, b.delta)
	})
	var c concurrency
	n := 0
	for _, e := range events {
		n += e.delta
		c.at, c.n = append(c.at, e.at), append(c.n, n)
	}
	return c
}

// peak is the most at once, and how long the count stayed above limit.
func (c concurrency) peak(limit int) (int, time.Duration) {
	most, over := 0, time.Duration(0)
	for i, n := range c.n {
		most = max(most, n)
		if n > limit && i+1 < len(c.at) {
			over += c.at[i+1] - c.at[i]
		}
	}
	return most, over
}

// most is the highest count in [from, to].
func (c concurrency) most(from, to time.Duration) int {
	i, _ := slices.BinarySearch(c.at, from)
	n := 0
	if i > 0 {
		n = c.n[i-1] // what held at from
	}
	for ; i < len(c.at) && c.at[i] <= to; i++ {
		n = max(n, c.n[i])
	}
	return n
}

// inUseSample is what Redis counted in use at a time of the upstream's.
type inUseSample struct {
	at time.Duration
	n  int
}

// checkChaos reads the schedule's outcome against the upstream's record,
// and Redis's count from settled on against the requests the upstream had
// around each sample (a grant reaches the upstream, and a release Redis,
// within milliseconds: half a second either way; with capacity leases a
// lease's use is reported at each renewal, a tick later: a second more).
func checkChaos(s schedule, outs []chaosOutcome, spans []testbed.Span, inUse []inUseSample, settled time.Duration) chaosReport {
	c := concurrencyOf(spans)
	byTenant := map[string][]testbed.Span{}
	for _, sp := range spans {
		byTenant[sp.Tag] = append(byTenant[sp.Tag], sp)
	}
	tenants := map[string]concurrency{}
	for t, sps := range byTenant {
		tenants[t] = concurrencyOf(sps)
	}
	r := chaosReport{sched: s, sent: len(outs), byReason: map[string]int{}}
	lag := 500 * time.Millisecond
	if s.leases {
		lag += time.Second
	}
	for _, x := range inUse {
		if x.at >= settled {
			r.stale = max(r.stale, x.n-c.most(x.at-lag, x.at+lag))
		}
	}
	r.peak, r.overFor = c.peak(chaosLimit)
	for _, o := range outs {
		switch {
		case o.status == http.StatusOK:
			r.ok++
		case o.reason != "":
			r.byReason[o.reason]++
			r.refusedTotal++
		default:
			r.errors++
		}
	}
	for _, o := range outs {
		if o.reason == "" {
			continue
		}
		// Held by its tenant's own limit (at some time while it was asked
		// about): that is the tenant's compartment at work, so neither a
		// refusal with capacity free nor, by another tenant's lower class,
		// an inversion.
		ownLimit := tenants[o.tenant].most(o.sent, o.done) >= chaosTenantLimit
		// Its class's ceiling was never reached while it was asked about
		// (a permit lags its request's end by milliseconds: one less).
		if c.most(o.sent, o.done) < chaosCeiling[o.class]-1 && !ownLimit {
			r.refusedFree++
		}
		if o.reason != "queue_full" && o.reason != "shed" && o.reason != "timeout" {
			continue
		}
		for _, a := range outs {
			if a.class > o.class && a.status == http.StatusOK && a.sent > o.sent && a.sent < o.done &&
				(a.tenant == o.tenant || !ownLimit) {
				r.inversions++ // a lower class got in while this one waited, then was refused
				break
			}
		}
	}
	return r
}

// logChaosSummary logs the schedules' figures per policy and per fault
// kind: what docs/redis.md reports.
func logChaosSummary(t *testing.T, reports []chaosReport) {
	if len(reports) == 0 {
		return
	}
	type agg struct {
		n, overN, sent, ok, refusedFree, inversions int
		worstPeak, worstStale                       int
		worstOver, worstBack                        time.Duration
	}
	by := map[string]*agg{}
	add := func(key string, r chaosReport) {
		a := by[key]
		if a == nil {
			a = &agg{}
			by[key] = a
		}
		a.n++
		if r.peak > chaosLimit {
			a.overN++
		}
		a.sent += r.sent
		a.ok += r.ok
		a.refusedFree += r.refusedFree
		a.inversions += r.inversions
		a.worstPeak = max(a.worstPeak, r.peak)
		a.worstOver = max(a.worstOver, r.overFor)
		a.worstBack = max(a.worstBack, r.back)
		a.worstStale = max(a.worstStale, r.stale)
	}
	for _, r := range reports {
		add("policy "+r.sched.name(), r)
		kinds := map[string]bool{}
		for _, f := range r.sched.faults {
			kinds[f.kind.String()] = true
		}
		for k := range kinds {
			add("fault "+k+" / "+r.sched.name(), r)
		}
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%d schedules\n%-44s %4s %4s %4s %9s %7s %5s %7s %12s %10s\n", len(reports),
		"", "runs", "over", "peak", "over_for", "back", "stale", "ok/sent", "refused_free", "inversions")
	for _, k := range keys {
		a := by[k]
		fmt.Fprintf(&b, "%-44s %4d %4d %4d %9v %7v %5d %7.2f %12d %10d\n", k, a.n, a.overN, a.worstPeak,
			a.worstOver.Round(time.Millisecond), a.worstBack.Round(time.Millisecond), a.worstStale,
			float64(a.ok)/float64(max(a.sent, 1)), a.refusedFree, a.inversions)
	}
	t.Log("chaos summary (schedules above the limit, worst peak, longest time above it, slowest permits back, most stale):\n" + b.String())
}
