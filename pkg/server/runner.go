package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/bulkhead-mesh/bulkhead/pkg/accesslog"
	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/control"
	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisledger"
	"github.com/bulkhead-mesh/bulkhead/pkg/replication"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
	"github.com/bulkhead-mesh/bulkhead/pkg/wire"
)

// maxGRPCHeaderList bounds the metadata of one gRPC request (Envoy sends a
// few hundred bytes; request headers travel in the CheckRequest message).
const maxGRPCHeaderList = 64 << 10

// grpcWindow is the daemon's static HTTP/2 flow-control window, per stream
// and per connection. Static windows turn off grpc-go's BDP estimation,
// which answers a stream of small access-log messages with a PING and a
// WINDOW_UPDATE about once per round trip: each is a wake-up, a read and a
// PING ACK for the Envoy worker (docs/performance.md, "Where the time
// goes"). 1 MiB is far above what a worker's access-log stream has in
// flight and below the 16 MiB the estimation may grow to.
const grpcWindow = 1 << 20

// Runner is one Bulkhead process: everything config describes, ready to Run.
type Runner struct {
	cfg         *config.Config
	log         *slog.Logger
	addressFile string
	drain       time.Duration
	watchPath   string
	watchFlags  *pflag.FlagSet
	tlsCheck    time.Duration // how often TLS files are checked for changes
	listen      listenFunc    // nil: net.Listen
	sizing      *sizing.Observer
	sampler     sizing.Sampler // of sizing: the permits in use, here or across the mesh

	Registry *bulkhead.Registry
	Control  *control.Control
	Ledger   *permit.Memory
	Metrics  *metrics.Metrics
	promReg  *prometheus.Registry
	authz    *authz.Server
	grpcTLS  *creds.TLS // nil without listen.grpc_tls
	admin    *admin.Server
	adminTLS *creds.TLS // nil without admin.tls
	als      *accesslog.Server
	memory   *admission.Memory // nil with ledger.backend redis
	shares   *shares.Manager
	replica  *replication.Replica // nil with ledger.backend memory
	gate     *replication.Gate    // nil with ledger.backend memory
	health   *health.Server
	streams  *streams // the long-lived streaming RPCs
	ready    atomic.Bool
}

// Option configures a Runner.
type Option func(*Runner)

// WithAddressFile makes Run write the bound addresses, as JSON
// {"grpc": "...", "http": "..."}, to path once both listeners are bound.
func WithAddressFile(path string) Option { return func(r *Runner) { r.addressFile = path } }

// WithConfigWatch makes Run reload the configuration file at path (loaded
// with flags, as at start) whenever it changes, including a Kubernetes
// ConfigMap update. An invalid edit is refused and counted; the last good
// configuration keeps serving.
func WithConfigWatch(path string, flags *pflag.FlagSet) Option {
	return func(r *Runner) { r.watchPath, r.watchFlags = path, flags }
}

// WithDrainTimeout bounds how long shutdown waits for Checks in flight
// (default 5s).
func WithDrainTimeout(d time.Duration) Option { return func(r *Runner) { r.drain = d } }

// withTLSCheckInterval sets how often, at most, the listeners' TLS files
// are checked for changes (default creds.DefaultCheckInterval).
func withTLSCheckInterval(d time.Duration) Option { return func(r *Runner) { r.tlsCheck = d } }

// listenFunc binds the listener named name ("grpc", "http" or "admin").
type listenFunc func(name, addr string) (net.Listener, error)

// withListen makes Run bind its listeners with listen (tests break them).
func withListen(listen listenFunc) Option { return func(r *Runner) { r.listen = listen } }

// New builds a runner for cfg. It starts nothing.
func New(cfg *config.Config, log *slog.Logger, opts ...Option) (*Runner, error) {
	r := &Runner{cfg: cfg, log: log, drain: 5 * time.Second, promReg: prometheus.NewRegistry(), tlsCheck: creds.DefaultCheckInterval}
	for _, o := range opts {
		o(r)
	}
	r.Registry = bulkhead.NewRegistry()
	r.health, r.streams = health.NewServer(), newStreams()
	r.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING) // until Run serves
	m, err := metrics.New(r.promReg, r.Registry)
	if err != nil {
		return nil, err
	}
	r.Metrics = m
	r.promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.Listen.GRPCTLS.Enabled() {
		if r.grpcTLS, err = r.listenerTLS("grpc", "listen.grpc_tls", cfg.Listen.GRPCTLS); err != nil {
			return nil, err
		}
	}
	r.Ledger = permit.NewMemory(clock.Real{}, permit.WithObserver(m), permit.WithSweepInterval(cfg.Leases.SweepInterval),
		permit.WithMaxLeases(cfg.Leases.MaxPermits))
	if err := metrics.RegisterOldest(r.promReg, r.Ledger, time.Now); err != nil {
		return nil, err
	}
	silent := permit.NewSilentNodes(log.With("component", "leases"))
	hb := cfg.Leases.Heartbeat()
	azOpts := []authz.Option{authz.WithLogger(log), authz.WithInputRecorder(m), authz.WithSilentNodes(silent)}
	alsOpts := []accesslog.Option{accesslog.WithHeartbeat(hb), accesslog.WithSilentNodes(silent)}
	lm, err := metrics.NewLedgerMetrics(r.promReg, cfg.Ledger.Backend.String())
	if err != nil {
		return nil, err
	}
	var backend admission.Ledger
	if cfg.Ledger.Backend == config.LedgerRedis {
		// Redis decides admissions, and keeps its own recovery window
		// (a bulkhead whose state it lost); this process's ledger holds
		// only the permits admitted while Redis does not answer.
		r.gate = replication.NewGate(lm, r.health, r.streams.sever)
		if r.replica, err = replication.NewReplica(cfg, replication.Parts{Leases: r.Ledger, Observer: m, Recorder: r.gate,
			FailOpen: lm, Log: log, Known: func(n string) bool { return r.Registry.Get(n) != nil }}); err != nil {
			return nil, err
		}
		m.UseGlobal(r.replica.Ledger)
		alsOpts = append(alsOpts, accesslog.WithHearing(r.replica.Ledger.HearsAllSince))
		if c := r.replica.Capacity; c != nil {
			if err := metrics.RegisterCapacity(r.promReg, c); err != nil {
				return nil, err
			}
		}
		backend = r.replica.Backend()
	} else {
		r.memory = admission.NewMemory(r.Registry, r.Ledger, hb, admission.WithRecovery(r.recoveryWindow(), func(paused bool) {
			r.Registry.SetPaused(paused)
			m.AdmissionsPaused(paused)
		}))
		backend = r.memory
	}
	breakers := breaker.NewSet(clock.Real{})
	r.sizing = sizing.New(clock.Real{})
	azOpts = append(azOpts, authz.WithBreakers(breakers))
	alsOpts = append(alsOpts, accesslog.WithCalls(calls{breakers, r.sizing}))
	if err := metrics.RegisterBreakers(r.promReg, breakers); err != nil {
		return nil, err
	}
	r.authz = authz.New(r.Registry, backend, m, authz.DefaultPolicy(), azOpts...)
	if c := r.capacity(); c != nil {
		// Shares are held from this replica's capacity leases, and Redis
		// keeps a lease that backs them as long as an Envoy may use them.
		r.shares = shares.New(cfg.Shares.Settings(), c.Local(), clock.Real{}, log.With("component", "shares"))
		r.shares.Lend(c)
		c.SetShares(r.shares)
	} else {
		r.shares = shares.New(cfg.Shares.Settings(), r.Registry, clock.Real{}, log.With("component", "shares"))
	}
	if err := metrics.RegisterShares(r.promReg, r.shares); err != nil {
		return nil, err
	}
	ctlOpts := []control.Option{control.WithOutcomes(r.sizing), control.WithBreakers(breakers), control.WithSizing(r.sizing)}
	r.sampler = r.shares.Sampler(sizing.LimiterSampler(r.Registry))
	if r.replica != nil {
		// Control applies what the replicator hears (Run), and tells it of
		// the overrides made here (the sink).
		repl := r.replica.Replicate(breakers, r.sizing)
		r.sizing.SetPeers(repl.Peers())
		r.sampler = replication.NewGlobalSampler(r.Registry.Keys, r.replica.Ledger.Global)
		ctlOpts = append(ctlOpts, control.WithOverrideSink(repl.Override), control.WithGlobal(r.replica.Ledger))
	}
	r.Control = control.New(r.Registry, r.authz, log, ctlOpts...)
	var aopts []admin.AuthOption
	if cfg.Admin.TokenFile != "" {
		aopts = append(aopts, admin.WithTokenFile(cfg.Admin.TokenFile))
	} else if cfg.Admin.Token != "" {
		aopts = append(aopts, admin.WithToken(cfg.Admin.Token))
	}
	auth, err := admin.NewAuthenticator(aopts...)
	if err != nil {
		return nil, fmt.Errorf("admin.token_file: %w", err)
	}
	if cfg.Admin.TLS.Enabled() {
		if r.adminTLS, err = r.listenerTLS("admin", "admin.tls", cfg.Admin.TLS); err != nil {
			return nil, err
		}
	}
	if err := admin.CheckListen(cfg.Listen.Admin, auth, r.adminTLS); err != nil {
		return nil, err
	}
	r.admin = admin.New(r.Control, auth, log.With("component", "admin"), admin.WithLeases(backend), admin.WithLedger(r.ledgerInfo))
	if _, err := r.Control.Reload(cfg); err != nil {
		return nil, err
	}
	m.SetKinds(cfg.Kinds())
	m.Reload(true)
	r.shares.Apply(cfg.Policies())
	r.als = accesslog.New(backend, m, log, alsOpts...)
	return r, nil
}

// capacity is the Redis ledger's capacity-lease backend, nil without one.
func (r *Runner) capacity() *redisledger.Capacity {
	if r.replica == nil {
		return nil
	}
	return r.replica.Capacity
}

// recoveryWindow is how long a starting daemon pauses admissions: the
// configured window, and with shares at least as long as an Envoy may run
// with a share handed out before the start (its layer's TTL and its
// requests' timeout): an Envoy that reconnects says what it holds, one
// that does not may hold it that long.
func (r *Runner) recoveryWindow() time.Duration {
	w := r.cfg.Leases.RecoveryWindow
	if w > 0 && r.cfg.SharesOn() {
		w = max(w, r.cfg.Shares.Settings().Tail())
	}
	return w
}

// Run serves until ctx ends, then shuts down gracefully. It returns an
// error if a listener cannot be bound or a server fails.
func (r *Runner) Run(ctx context.Context) error {
	listen := r.listen
	if listen == nil {
		listen = func(_, addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	var lns [3]net.Listener // grpc, http, admin
	for i, l := range [...]struct{ name, addr string }{{"grpc", r.cfg.Listen.GRPC}, {"http", r.cfg.Listen.HTTP}, {"admin", r.cfg.Listen.Admin}} {
		var err error
		if lns[i], err = listen(l.name, l.addr); err != nil {
			for _, ln := range lns[:i] {
				ln.Close()
			}
			return fmt.Errorf("listen.%s: %w", l.name, err)
		}
	}
	grpcLn, httpLn, adminLn := lns[0], lns[1], lns[2]

	flight, long := newInflight(), r.streams
	gopts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(flight.interceptor),
		grpc.ChainStreamInterceptor(long.interceptor),
		grpc.WaitForHandlers(true), // Stop and GracefulStop return after every handler
		// Envoy pings its connections each second (the shipped configs'
		// connection_keepalive, which finds a daemon that stopped
		// answering); do not punish it for that.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 500 * time.Millisecond, PermitWithoutStream: true}),
		// Bounds on what one client can make the daemon hold.
		grpc.MaxRecvMsgSize(r.cfg.Listen.GRPCMaxRecvBytes),
		grpc.MaxConcurrentStreams(uint32(r.cfg.Listen.GRPCMaxConcurrentStreams)),
		grpc.MaxHeaderListSize(maxGRPCHeaderList),
		grpc.InitialWindowSize(grpcWindow),
		grpc.InitialConnWindowSize(grpcWindow),
		// Check and access-log messages are read straight from their
		// encoding (package wire); other services use protobuf as usual.
		wire.ServerCodec(),
	}
	if r.grpcTLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(r.grpcTLS.ServerConfig("h2")))) // gRPC requires HTTP/2 by ALPN
	}
	if age := r.cfg.Listen.GRPCMaxConnectionAge; age > 0 {
		gopts = append(gopts, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge: age, MaxConnectionAgeGrace: r.cfg.Listen.GRPCMaxConnectionAgeGrace,
		}))
	}
	gs := grpc.NewServer(gopts...)
	authz.Register(gs, r.authz)
	accesslog.Register(gs, r.als)
	shares.Register(gs, r.shares)
	hs := r.health
	healthpb.RegisterHealthServer(gs, hs)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(r.promReg, promhttp.HandlerOpts{Registry: r.promReg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	// Background work, stopped after the listeners: the sweeper, the end of
	// the recovery window and the configuration watch, then the admin server.
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	var background errgroup.Group
	background.Go(func() error { return r.Ledger.Run(sweepCtx) })
	if r.replica != nil {
		background.Go(func() error { return r.replica.Run(sweepCtx, r.Registry, r.Control) })
	}
	if r.memory != nil {
		background.Go(func() error {
			if r.memory.Recover(sweepCtx) {
				r.log.Info("recovery window over: admitting", "window", r.cfg.Leases.RecoveryWindow, "permits_held", r.Ledger.Len())
			}
			return nil
		})
	}
	background.Go(func() error { return r.sizing.Run(sweepCtx, r.sampler, sizing.SampleEvery) })
	background.Go(func() error { return r.shares.Run(sweepCtx) })
	if r.watchPath != "" {
		background.Go(func() error {
			if err := config.Watch(sweepCtx, r.watchPath, r.watchFlags, r.reload); err != nil {
				r.log.Error("configuration file not watched: changes need a restart", "path", r.watchPath, "err", err)
			}
			return nil
		})
	}
	adminCtx, stopAdmin := context.WithCancel(context.Background())
	var adminSrv errgroup.Group
	adminSrv.Go(func() error { return r.admin.Serve(adminCtx, adminLn, r.adminTLS) })
	// The servers Envoy and Prometheus talk to: the first to fail ends Run
	// with its error. Both return nil once stopped.
	servers, serversCtx := errgroup.WithContext(ctx)
	servers.Go(func() error {
		// A shutdown that came before Serve started stops it at once
		// (ErrServerStopped, the listener closed): nothing failed.
		if err := gs.Serve(grpcLn); !errors.Is(err, grpc.ErrServerStopped) {
			return err
		}
		return nil
	})
	servers.Go(func() error {
		if err := hsrv.Serve(httpLn); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})

	addrs := map[string]string{"grpc": grpcLn.Addr().String(), "http": httpLn.Addr().String(), "admin": adminLn.Addr().String()}
	if err := r.writeAddressFile(addrs); err != nil {
		r.log.Error("address file not written", "path", r.addressFile, "err", err)
	}
	if r.gate != nil {
		r.gate.Serve() // serving while the shared ledger is strict
	} else {
		hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	}
	r.ready.Store(true)
	r.log.Info("serving", "grpc", addrs["grpc"], "http", addrs["http"], "admin", addrs["admin"], "bulkheads", r.Registry.Len())

	<-serversCtx.Done()
	if ctx.Err() == nil {
		r.log.Error("server failed", "err", context.Cause(serversCtx))
	}

	r.log.Info("shutting down")
	r.ready.Store(false)
	hs.Shutdown()
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), r.drain)
	var drain errgroup.Group
	drain.Go(func() error {
		// Checks in flight answer; access-log streams keep releasing meanwhile.
		flight.wait(drainCtx)
		// Then end the streams, so that GracefulStop can finish: it writes
		// every answer before it closes a connection (Stop would drop them).
		long.stop()
		// Past the drain timeout, Stop cuts GracefulStop short.
		<-drainCtx.Done()
		if errors.Is(drainCtx.Err(), context.DeadlineExceeded) {
			gs.Stop()
		}
		return nil
	})
	gs.GracefulStop()
	cancelDrain() // stopped: nothing left to cut short
	_ = drain.Wait()
	shutCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = hsrv.Shutdown(shutCtx)
	cancel()
	runErr := servers.Wait()
	stopSweep()
	if err := background.Wait(); runErr == nil {
		runErr = err
	}
	stopAdmin()
	if err := adminSrv.Wait(); err != nil {
		r.log.Error("admin server", "err", err)
	}
	r.log.Info("stopped", "permits_outstanding", r.Ledger.Len())
	return runErr
}

func (r *Runner) writeAddressFile(addrs map[string]string) error {
	if r.addressFile == "" {
		return nil
	}
	b, err := json.Marshal(addrs)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(r.addressFile), ".bulkhead-addr-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), r.addressFile)
}

// reload applies a changed configuration file, or counts and logs why it
// was refused. Settings that need a restart are reported and ignored.
func (r *Runner) reload(cfg *config.Config, err error) {
	if err != nil {
		r.Metrics.Reload(false)
		r.log.Error("configuration reload refused; the last good configuration keeps serving", "path", r.watchPath, "err", err)
		return
	}
	for _, w := range cfg.Warnings {
		r.log.Warn("configuration: deprecated setting", "warning", w, "path", r.watchPath)
	}
	if keys := config.RestartOnly(r.cfg, cfg); len(keys) > 0 {
		r.log.Warn("changed settings take effect at the next restart "+
			"(the content of the TLS files is reloaded when they change)", "settings", keys, "path", r.watchPath)
	}
	if _, err := r.Control.Reload(cfg); err != nil {
		r.Metrics.Reload(false)
		r.log.Error("configuration reload partly applied", "path", r.watchPath, "err", err)
		return
	}
	r.Metrics.SetKinds(cfg.Kinds())
	r.Metrics.Reload(true)
	r.shares.Apply(cfg.Policies())
}

// ledgerInfo is what the admin API says of the permit ledger.
func (r *Runner) ledgerInfo() admin.LedgerInfo {
	if r.replica == nil {
		return admin.LedgerInfo{Backend: config.LedgerMemory.String(), State: "strict", Replicas: 1}
	}
	return admin.LedgerInfo{Backend: config.LedgerRedis.String(), State: r.replica.Ledger.State().String(),
		Replicas: r.replica.Ledger.Replicas(), OnUnavailable: r.cfg.Ledger.OnUnavailable.String(),
		CapacityLeases: r.cfg.Ledger.Redis.CapacityLeases}
}
