package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// clients per route. The /product clients fit the catalog pool's workers
// plus queue (4+4), so a healthy catalog never rejects them.
var clients = map[string]int{"/order": 4, "/product": 8}

var routes = []string{"/order", "/product"}

// run starts the upstreams and the service, drives two load phases, prints
// what happened and the bulkhead metrics, and stops everything.
func run(ctx context.Context, out io.Writer, phase time.Duration) (err error) {
	ups := map[string]*upstream{}
	defer func() {
		for _, u := range ups {
			err = errors.Join(err, u.stop())
		}
	}()
	for _, name := range []string{"catalog", "auth", "orders"} {
		u, err := startUpstream(name, 2*time.Second)
		if err != nil {
			return err
		}
		ups[name] = u
	}
	s, err := newService(ups)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(err, s.close(ctx))
	}()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = clients["/order"] + clients["/product"]
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}

	fmt.Fprintf(out, "clients per route %v, %s per phase, service at %s\n\n", clients, phase, s.frontURL)
	healthy := drive(ctx, client, s.frontURL, phase)
	ups["catalog"].slow.Store(true) // every catalog request now takes 2s
	slow := drive(ctx, client, s.frontURL, phase)
	report(out, map[string]map[string]*routeStats{"1 healthy": healthy, "2 catalog slow": slow})
	st := s.catalog.Stats()
	fmt.Fprintf(out, "\ncatalog pool: %d workers; %d calls abandoned while running at the 100ms call timeout, %d while queued\n",
		st.Workers, st.Abandoned, st.Snapshot.Rejected[bulkhead.ReasonTimeout])
	return printMetrics(ctx, out, client, s.frontURL+"/metrics")
}

type routeStats struct {
	requests, ok, degraded, failed int
	lat                            []time.Duration
}

// drive sends requests from each route's clients, one at a time each, for d.
func drive(ctx context.Context, client *http.Client, base string, d time.Duration) map[string]*routeStats {
	deadline := time.Now().Add(d)
	var mu sync.Mutex
	stats := map[string]*routeStats{}
	for _, r := range routes {
		stats[r] = &routeStats{}
	}
	var wg sync.WaitGroup
	for route, n := range clients {
		for range n {
			wg.Go(func() { drive1(ctx, client, base, route, deadline, &mu, stats[route]) })
		}
	}
	wg.Wait()
	return stats
}

// drive1 is one client sending requests to route until deadline.
func drive1(ctx context.Context, client *http.Client, base, route string, deadline time.Time, mu *sync.Mutex, st *routeStats) {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		start := time.Now()
		degraded, err := hit(ctx, client, base+route)
		lat := time.Since(start)
		mu.Lock()
		st.requests++
		switch {
		case err != nil:
			st.failed++
		case degraded:
			st.degraded++
		default:
			st.ok++
		}
		st.lat = append(st.lat, lat)
		mu.Unlock()
	}
}

// hit makes one request and reports whether the answer was degraded.
func hit(ctx context.Context, client *http.Client, url string) (degraded bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %d %s", url, resp.StatusCode, resp.Header.Get("x-bulkhead-reason"))
	}
	return resp.Header.Get("x-degraded") != "", nil
}

func report(out io.Writer, phases map[string]map[string]*routeStats) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\troute\trequests\tok\tdegraded\tfailed\tp50\tp99\t")
	for _, name := range slices.Sorted(maps.Keys(phases)) {
		for _, r := range routes {
			st := phases[name][r]
			slices.Sort(st.lat)
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t\n", name, r, st.requests, st.ok, st.degraded, st.failed,
				quantile(st.lat, 0.5), quantile(st.lat, 0.99))
		}
	}
	_ = tw.Flush()
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))].Round(10 * time.Microsecond)
}

// printMetrics prints the service's non-zero bulkhead series, without
// histogram buckets.
func printMetrics(ctx context.Context, out io.Writer, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	fmt.Fprintln(out, "\nbulkhead metrics on /metrics (non-zero series, no buckets):")
	keep := []string{"bulkhead_limit{", "bulkhead_active_calls{", "bulkhead_admitted_total{", "bulkhead_rejected_total{",
		"bulkhead_success_total{", "bulkhead_failure_total{", "bulkhead_wait_seconds_count{"}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(line, " 0") || !slices.ContainsFunc(keep, func(p string) bool { return strings.HasPrefix(line, p) }) {
			continue
		}
		fmt.Fprintln(out, "  "+line)
	}
	return sc.Err()
}
