package main

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// route is one demo route: an upstream of the same name, reached through
// Envoy at path, guarded by the bulkhead of the same name.
type route struct {
	name     string
	upstream string // 127.0.0.1:port, as in envoy.DemoParams
	path     string
	// fast is the upstream's usual response time, drawn per request.
	fast [2]time.Duration
}

var demoRoutes = []route{
	{name: "catalog", upstream: "127.0.0.1:8081", path: "/catalog/items", fast: [2]time.Duration{5 * time.Millisecond, 20 * time.Millisecond}},
	{name: "auth", upstream: "127.0.0.1:8082", path: "/auth/token", fast: [2]time.Duration{5 * time.Millisecond, 10 * time.Millisecond}},
	{name: "orders", upstream: "127.0.0.1:8083", path: "/orders/42", fast: [2]time.Duration{5 * time.Millisecond, 15 * time.Millisecond}},
}

// routeNamed returns the demo route called name.
func routeNamed(name string) (route, bool) {
	for _, r := range demoRoutes {
		if r.name == name {
			return r, true
		}
	}
	return route{}, false
}

// routeNames lists the demo routes' names.
func routeNames() []string {
	names := make([]string, len(demoRoutes))
	for i, r := range demoRoutes {
		names[i] = r.name
	}
	return names
}

// flow is one stream of requests: a route at a rate with one priority.
type flow struct {
	route    string
	priority string // x-bulkhead-priority; "" sends none (the default, normal)
	rate     float64

	load   *testbed.Load
	window testbed.Stats // the last window, for the live table
	result testbed.Stats // Run's result, for the summary
}

// demoFlows: catalog gets 50 requests/s of which 8% critical and 30%
// best_effort (a slow catalog admits 5/s at 2s each, enough for critical);
// auth and orders 40/s each.
func demoFlows() []*flow {
	return []*flow{
		{route: "catalog", priority: "critical", rate: 4},
		{route: "catalog", priority: "normal", rate: 31},
		{route: "catalog", priority: "best_effort", rate: 15},
		{route: "auth", rate: 40},
		{route: "orders", rate: 40},
	}
}

const (
	clientTimeout  = 5 * time.Second
	maxOutstanding = 300
	maxSamples     = 50_000
	// untilStopped bounds a load started with --duration 0.
	untilStopped = 24 * time.Hour
)

// newLoads builds each flow's Load against Envoy's listener at base
// (http://host:port).
func newLoads(flows []*flow, base string, duration time.Duration) error {
	bound := duration
	if bound == 0 {
		bound = untilStopped
	}
	for _, f := range flows {
		r, _ := routeNamed(f.route)
		path := r.path
		header := http.Header{}
		if f.priority != "" {
			header.Set("x-bulkhead-priority", f.priority)
		}
		l, err := testbed.NewLoad(testbed.LoadSpec{
			URL:            base + path,
			Header:         header,
			Rate:           f.rate,
			Duration:       duration,
			MaxRequests:    int(f.rate*bound.Seconds()) + 1,
			MaxOutstanding: maxOutstanding,
			Timeout:        clientTimeout,
			MaxSamples:     maxSamples,
		})
		if err != nil {
			return err
		}
		f.load = l
	}
	return nil
}

// runLoads runs every flow's load until its schedule ends (or stopLoads
// ends it) and its requests have finished, or until ctx ends, which cancels
// them. It closes the returned channel when all have finished.
func runLoads(ctx context.Context, flows []*flow) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, f := range flows {
		wg.Go(func() {
			s, _ := f.load.Run(ctx) // each Load runs once: no error
			f.result = s
		})
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}

// stopLoads ends every flow's schedule and returns the number of requests
// then in flight.
func stopLoads(flows []*flow) int {
	n := 0
	for _, f := range flows {
		n += f.load.Stop()
	}
	return n
}

// routeWindow merges the last windows of a route's flows.
func routeWindow(flows []*flow, name string) testbed.Stats {
	var parts []testbed.Stats
	for _, f := range flows {
		if f.route == name {
			parts = append(parts, f.window)
		}
	}
	return testbed.MergeStats(parts...)
}

// routeResult merges the final results of a route's flows.
func routeResult(flows []*flow, name string) testbed.Stats {
	var parts []testbed.Stats
	for _, f := range flows {
		if f.route == name {
			parts = append(parts, f.result)
		}
	}
	return testbed.MergeStats(parts...)
}
