package isolation_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
)

// The design's scenario, in process: a service with a fixed number of
// request handlers calls three dependencies over HTTP on 127.0.0.1. One
// (catalog) becomes slow: its requests hang. With a bulkhead per
// dependency, calls to auth and orders keep succeeding with their
// latency; without, catalog's hanging calls capture every handler.

const (
	handlers    = 8   // the service's request handlers
	perClient   = 100 // requests per auth/orders client per phase
	flooders    = 8   // goroutines sending catalog requests
	floodPeriod = 2 * time.Millisecond
)

type service struct {
	deps      map[string]string // name -> base URL
	client    *http.Client
	bulkheads map[string]isolation.Bulkhead // nil: no isolation
	requests  chan request
	wg        sync.WaitGroup
}

type request struct {
	dep   string
	reply chan error
}

func (s *service) start() {
	for range handlers {
		s.wg.Go(func() {
			for r := range s.requests {
				r.reply <- s.handle(r.dep)
			}
		})
	}
}

func (s *service) stop() { close(s.requests); s.wg.Wait() }

func (s *service) handle(dep string) error {
	get := func(ctx context.Context) (string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.deps[dep], nil)
		resp, err := s.client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	b := s.bulkheads[dep]
	if b == nil {
		_, err := get(context.Background())
		return err
	}
	var fallback func(context.Context, error) (string, error)
	if dep == "catalog" { // a clean degraded answer; auth and orders must really succeed
		fallback = func(context.Context, error) (string, error) { return "stale", nil }
	}
	_, err := isolation.Do(context.Background(), b, get, fallback, bulkhead.Normal)
	return err
}

// call sends one request through the service and returns its latency.
func (s *service) call(dep string) (time.Duration, error) {
	start := time.Now()
	r := request{dep: dep, reply: make(chan error, 1)}
	s.requests <- r
	err := <-r.reply
	return time.Since(start), err
}

// upstreams starts the three dependencies; catalog waits for slow to be
// open (or its request to end) before it answers.
func upstreams(t *testing.T, slow *atomic.Pointer[gate]) map[string]string {
	deps := map[string]string{}
	for _, name := range []string{"catalog", "auth", "orders"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if name == "catalog" {
				_ = slow.Load().wait(r.Context())
			}
			_, _ = fmt.Fprint(w, name)
		}))
		t.Cleanup(srv.Close)
		deps[name] = srv.URL
	}
	return deps
}

// phase runs 2 clients each for auth and orders (perClient requests each)
// while flooders send catalog requests, and returns the auth/orders
// latencies and errors.
func (s *service) phase(t *testing.T) (lat []time.Duration, errs int) {
	t.Helper()
	stop := make(chan struct{})
	var flood sync.WaitGroup
	for range flooders {
		flood.Go(func() {
			tick := time.NewTicker(floodPeriod)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				r := request{dep: "catalog", reply: make(chan error, 1)}
				select {
				case s.requests <- r:
				case <-stop:
					return
				}
				select { // a hanging catalog call keeps its flooder here
				case <-r.reply:
				case <-stop:
					return
				}
			}
		})
	}
	var mu sync.Mutex
	var clients sync.WaitGroup
	for _, dep := range []string{"auth", "orders", "auth", "orders"} {
		clients.Go(func() {
			for range perClient {
				d, err := s.call(dep)
				mu.Lock()
				lat = append(lat, d)
				if err != nil {
					errs++
					t.Logf("%s: %v", dep, err)
				}
				mu.Unlock()
			}
		})
	}
	clients.Wait()
	close(stop)
	flood.Wait()
	slices.Sort(lat)
	return lat, errs
}

func TestScenarioSlowDependency(t *testing.T) {
	settings := bulkhead.Settings{MaxConcurrent: 2, MaxQueue: 2}
	builds := map[string]func(t *testing.T, name string) isolation.Bulkhead{
		"semaphore": func(t *testing.T, name string) isolation.Bulkhead {
			return isolation.NewSemaphore(mustLimiter(t, name, settings))
		},
		"pool": func(t *testing.T, name string) isolation.Bulkhead {
			if name != "catalog" {
				return mustPool(t, name, settings)
			}
			// Catalog's callers stop waiting after 100ms (its calls are cancelled).
			return mustPool(t, name, settings, isolation.WithCallTimeout(100*time.Millisecond))
		},
	}
	for kind, build := range builds {
		t.Run(kind, func(t *testing.T) {
			var slow atomic.Pointer[gate]
			open := newGate()
			open.Open()
			slow.Store(open)
			s := newService(t, upstreams(t, &slow))
			for _, dep := range []string{"catalog", "auth", "orders"} {
				s.bulkheads[dep] = build(t, dep)
			}
			s.start()
			defer s.stop()

			base, errs := s.phase(t)
			if errs != 0 {
				t.Fatalf("baseline: %d errors", errs)
			}
			hang := newGate()
			slow.Store(hang)
			defer hang.Open() // before the servers close (cleanups run after)
			got, errs := s.phase(t)
			if errs != 0 {
				t.Fatalf("with catalog slow: %d of %d auth/orders calls failed", errs, len(got))
			}
			p50b, p50 := base[len(base)/2], got[len(got)/2]
			p99b, p99 := base[len(base)*99/100], got[len(got)*99/100]
			t.Logf("auth+orders latency: baseline p50 %v p99 %v; catalog slow p50 %v p99 %v", p50b, p99b, p50, p99)
			// Generous bounds; without isolation these calls never complete
			// while catalog hangs (see TestScenarioWithoutIsolation).
			if p50 > 4*p50b+5*time.Millisecond || got[len(got)-1] > time.Second {
				t.Fatalf("latency degraded: p50 %v (baseline %v), max %v", p50, p50b, got[len(got)-1])
			}
			if c := s.bulkheads["catalog"].Snapshot(); c.InUse > settings.MaxConcurrent || c.Rejected[bulkhead.ReasonQueueFull] == 0 {
				t.Fatalf("catalog bulkhead: %+v", c)
			}
		})
	}
}

// TestScenarioWithoutIsolation is the control: with no bulkhead, hanging
// catalog calls capture every handler of the service.
func TestScenarioWithoutIsolation(t *testing.T) {
	var slow atomic.Pointer[gate]
	hang := newGate()
	slow.Store(hang)
	s := newService(t, upstreams(t, &slow))
	s.start()
	defer s.stop()
	defer hang.Open()
	replies := make([]chan error, handlers)
	for i := range replies {
		replies[i] = make(chan error, 1)
		s.requests <- request{dep: "catalog", reply: replies[i]}
	}
	hang.awaitEntered(t, handlers) // every handler now waits on catalog: auth would queue behind them
	hang.Open()
	for _, r := range replies {
		if err := recv(t, r); err != nil {
			t.Fatal(err)
		}
	}
}

func newService(t *testing.T, deps map[string]string) *service {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	t.Cleanup(tr.CloseIdleConnections)
	return &service{deps: deps, client: &http.Client{Transport: tr}, bulkheads: map[string]isolation.Bulkhead{}, requests: make(chan request)}
}
