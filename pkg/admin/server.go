package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// maxBody bounds a request body (JSON) or message (gRPC).
const maxBody = 64 << 10

// Server is the admin API: the gRPC service and the JSON API over one
// Controller, behind one Authenticator.
type Server struct {
	ctl         Controller
	leases      Leases            // nil: ListHolders is unimplemented
	ledger      func() LedgerInfo // nil: the list names no ledger
	auth        *Authenticator
	log         *slog.Logger
	clock       clock.Clock
	shutdown    time.Duration
	maxWatchers int

	svc      *service
	grpc     *grpc.Server
	handler  http.Handler
	watchers chan struct{} // a slot per running watch stream
	stopping chan struct{} // closed by Stop
	stopOnce sync.Once
}

// Option configures a Server.
type Option func(*Server)

// LedgerInfo is what the admin API says of the permit ledger.
type LedgerInfo struct {
	Backend       string // memory or redis
	State         string // strict or unavailable
	Replicas      int
	OnUnavailable string // with redis
	// CapacityLeases: with redis, each replica admits from a capacity
	// lease (ledger.redis.capacity_leases); false: every Check per request.
	CapacityLeases bool
}

// WithLedger makes ListBulkheads say which ledger serves, as info reports
// it at each call.
func WithLedger(info func() LedgerInfo) Option { return func(s *Server) { s.ledger = info } }

// WithClock sets the clock of watch streams (default clock.Real).
func WithClock(c clock.Clock) Option { return func(s *Server) { s.clock = c } }

// WithMaxWatchers bounds the watch streams open at once (default 32).
func WithMaxWatchers(n int) Option { return func(s *Server) { s.maxWatchers = max(n, 1) } }

// WithShutdownTimeout bounds how long Serve waits for calls in flight once
// its context ends (default 5s).
func WithShutdownTimeout(d time.Duration) Option { return func(s *Server) { s.shutdown = d } }

// New returns an admin server for ctl. auth decides who may call (see
// Authenticator); log receives the refused calls. It starts nothing.
func New(ctl Controller, auth *Authenticator, log *slog.Logger, opts ...Option) *Server {
	s := &Server{
		ctl: ctl, auth: auth, log: log,
		clock: clock.Real{}, shutdown: 5 * time.Second, maxWatchers: 32,
		stopping: make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	s.watchers = make(chan struct{}, s.maxWatchers)
	s.svc = &service{s: s}
	s.grpc = grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
		grpc.MaxRecvMsgSize(maxBody),
	)
	adminv1.RegisterAdminServiceServer(s.grpc, s.svc)
	api := s.jsonAPI()
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			s.grpc.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
	return s
}

// Handler serves gRPC (HTTP/2 requests with content-type application/grpc)
// and the JSON API (everything else). The http.Server it is mounted on
// must speak HTTP/2: see HTTPServer.
func (s *Server) Handler() http.Handler { return s.handler }

// GRPCServer returns the gRPC server behind Handler, with AdminService and
// the authentication interceptors registered (for tests, or to serve it
// on a listener of its own with grpc.Server.Serve). Serve stops it when it
// returns.
func (s *Server) GRPCServer() *grpc.Server { return s.grpc }

// HTTPServer returns an http.Server for Handler: HTTP/1.1 and HTTP/2, over
// TLS from tlsFiles when it is not nil (use ServeTLS(ln, "", ""); each
// handshake serves the files' current certificate), otherwise cleartext
// HTTP/2 with prior knowledge (h2c), as gRPC clients speak it.
func (s *Server) HTTPServer(tlsFiles *creds.TLS) *http.Server {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	var tlsCfg *tls.Config
	if tlsFiles != nil {
		p.SetHTTP2(true)
		tlsCfg = tlsFiles.ServerConfig(nextProtos...)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return &http.Server{
		Handler:           s.handler,
		Protocols:         p,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxBody,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// Serve serves the admin API on ln (over TLS when tlsFiles is not nil) until
// ctx ends, then stops: watch streams end, calls in flight get the
// shutdown timeout to finish. It returns after every goroutine it started
// has stopped; the error is nil after ctx ended, else the server's error.
// Serve closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener, tlsFiles *creds.TLS) error {
	hs := s.HTTPServer(tlsFiles)
	done := make(chan error, 1)
	go func() {
		if tlsFiles != nil {
			done <- hs.ServeTLS(ln, "", "")
		} else {
			done <- hs.Serve(ln)
		}
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
	}
	s.Stop()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.shutdown)
	defer cancel()
	if serr := hs.Shutdown(sctx); serr != nil {
		hs.Close()
	}
	if err == nil {
		err = <-done
	}
	s.grpc.Stop()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Stop ends every watch stream (the client sees UNAVAILABLE) and makes new
// ones fail the same way. Other calls are not affected. It is idempotent.
func (s *Server) Stop() { s.stopOnce.Do(func() { close(s.stopping) }) }

// Watchers returns the number of watch streams open now.
func (s *Server) Watchers() int { return len(s.watchers) }
