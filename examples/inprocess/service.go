package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation/callmetrics"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation/httpbulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
)

// service is the Go service being protected: routes /product (catalog +
// auth) and /order (auth + orders), and /metrics.
type service struct {
	ups        map[string]*upstream
	catalog    *isolation.Pool
	auth       *httpbulkhead.Transport
	orders     *httpbulkhead.Transport
	plain      *http.Transport // the catalog pool's client transport
	authC      *http.Client
	ordersC    *http.Client
	catalogC   *http.Client
	front      *http.Server
	frontURL   string
	frontServe chan error
}

func newService(ups map[string]*upstream) (*service, error) {
	// Bulkheads for the service's own routes and for its dependencies. In a
	// real service both would come from configuration.
	routes := bulkhead.NewRegistry()
	if _, err := routes.Apply(map[string]bulkhead.Settings{
		"product": {MaxConcurrent: 16, MaxQueue: 16, MaxWait: 200 * time.Millisecond, ReserveCritical: 0.25},
		"order":   {MaxConcurrent: 16, MaxQueue: 16, MaxWait: 200 * time.Millisecond, ReserveCritical: 0.25},
	}); err != nil {
		return nil, err
	}
	deps := bulkhead.NewRegistry()
	if _, err := deps.Apply(map[string]bulkhead.Settings{
		"auth":   {MaxConcurrent: 8, MaxQueue: 8, MaxWait: 100 * time.Millisecond},
		"orders": {MaxConcurrent: 8, MaxQueue: 8, MaxWait: 100 * time.Millisecond},
	}); err != nil {
		return nil, err
	}

	// One set of collectors for everything; the pool joins the Group
	// before anything is served.
	var pools isolation.Group
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, isolation.Sources{routes, deps, &pools})
	if err != nil {
		return nil, err
	}
	obs := callmetrics.New(m)

	s := &service{ups: ups, frontServe: make(chan error, 1)}
	s.catalog, err = isolation.NewPool("catalog", bulkhead.Settings{MaxConcurrent: 4, MaxQueue: 4},
		isolation.WithCallTimeout(100*time.Millisecond), isolation.WithObserver(obs))
	if err != nil {
		return nil, err
	}
	pools = append(pools, s.catalog)
	s.plain = httpbulkhead.MatchTransport(http.DefaultTransport.(*http.Transport), 4)
	s.catalogC = &http.Client{Transport: s.plain}
	s.auth = httpbulkhead.NewTransport(deps.Get("auth"), nil, httpbulkhead.WithObserver(obs))
	s.authC = &http.Client{Transport: s.auth}
	s.orders = httpbulkhead.NewTransport(deps.Get("orders"), nil, httpbulkhead.WithObserver(obs))
	s.ordersC = &http.Client{Transport: s.orders}

	mux := http.NewServeMux()
	mux.HandleFunc("/product", s.product)
	mux.HandleFunc("/order", s.order)
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	byRoute := func(r *http.Request) string {
		return map[string]string{"/product": "product", "/order": "order"}[r.URL.Path] // "" = unguarded
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, errors.Join(err, s.catalog.Close(context.Background()))
	}
	s.frontURL = "http://" + lis.Addr().String()
	s.front = &http.Server{
		Handler:           httpbulkhead.NewHandler(mux, routes, byRoute, httpbulkhead.WithObserver(obs)),
		ReadHeaderTimeout: time.Second,
	}
	go func() { s.frontServe <- s.front.Serve(lis) }()
	return s, nil
}

// product answers with the catalog's product (or the cached one when the
// catalog pool cannot give it in time) and the caller's identity.
func (s *service) product(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	prio, err := bulkhead.ParsePriority(r.Header.Get(isolation.PriorityHeader))
	if err != nil {
		prio = bulkhead.Normal
	}
	degraded := false
	item, _ := isolation.Do(ctx, s.catalog, func(ctx context.Context) (string, error) {
		return get(ctx, s.catalogC, s.ups["catalog"].url)
	}, func(context.Context, error) (string, error) {
		degraded = true // runs on this goroutine
		return "cached product", nil
	}, prio)
	user, err := get(ctx, s.authC, s.ups["auth"].url)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if degraded {
		w.Header().Set("x-degraded", "catalog")
	}
	fmt.Fprintf(w, "%s for %s\n", item, user)
}

// order needs auth and orders; a rejection by either bulkhead is a 503.
func (s *service) order(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	for _, c := range []struct {
		client *http.Client
		url    string
	}{{s.authC, s.ups["auth"].url}, {s.ordersC, s.ups["orders"].url}} {
		if _, err := get(ctx, c.client, c.url); err != nil {
			code := http.StatusBadGateway
			if bulkhead.ReasonOf(err) != bulkhead.ReasonNone {
				code = http.StatusServiceUnavailable
			}
			http.Error(w, err.Error(), code)
			return
		}
	}
	fmt.Fprintln(w, "order placed")
}

// close stops the front server, then the pool, then idle connections.
func (s *service) close(ctx context.Context) error {
	err := s.front.Shutdown(ctx)
	if serr := <-s.frontServe; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	err = errors.Join(err, s.catalog.Close(ctx))
	s.auth.CloseIdleConnections()
	s.orders.CloseIdleConnections()
	s.plain.CloseIdleConnections()
	return err
}
