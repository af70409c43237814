package meshsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
)

// NodeMetadata is the gRPC initial metadata that names an Envoy in its
// Checks (the shipped bootstrap's ext_authz initial_metadata).
const NodeMetadata = "x-bulkhead-node"

// DurationShare is a share of the requests that last Duration.
type DurationShare struct {
	Duration time.Duration
	Weight   float64
}

// Route is a bulkhead the simulated routes name, and its limit (0: none
// the simulator checks).
type Route struct {
	Bulkhead string
	Limit    int
	Weight   float64 // share of the requests; 0 counts as 1
	// Shares is the bulkhead's shares mode in the daemon's configuration
	// ("shares" or "auto"; "": strict).
	Shares string
}

// Config is a simulated mesh.
type Config struct {
	// Targets are the daemon replicas' gRPC addresses: the endpoints of the
	// Envoys' one bulkhead cluster.
	Targets []string
	// Spread is how each Envoy spreads its workers' traffic over Targets
	// (default SpreadRequest).
	Spread  Spread
	Envoys  int
	Workers int    // per Envoy; default 2
	Node    string // node id prefix; default "sim"
	Routes  []Route
	Tenants int // tenant header values, spread uniformly; 0 = no tenant header
	// Durations is the mix of request durations (default: 70% 20 ms, 25%
	// 200 ms, 5% 2.5 s).
	Durations []DurationShare
	// Priorities are the route priorities, spread uniformly ("" = the
	// route names none); default: none.
	Priorities []string
	// Heartbeat is Envoy's access_log_flush_interval (default 1 s);
	// HeartbeatFlush the heartbeat log's buffer_flush_interval (default a
	// quarter of it), HeartbeatBytes its buffer_size_bytes (16384).
	Heartbeat, HeartbeatFlush time.Duration
	HeartbeatBytes            int
	// SingleLog sends the periodic entries on the release log, unbuffered,
	// as an Envoy rendered with envoy.Params.SingleAccessLog does: one
	// access-log stream per worker instead of two.
	SingleLog bool
	// CheckTimeout is ext_authz's timeout (default 1 s).
	CheckTimeout time.Duration
	// Ping is the connections' keepalive interval (default 1 s; < 0: none).
	Ping time.Duration
	// HealthCheck, if positive, is the interval of each Envoy's active
	// gRPC health check of each target, on a connection of its own per
	// target, pinged as the others (DefaultHealthCheck is the shipped
	// configs' with replicas); 0 or less: none, as the shipped configs for
	// one daemon. HealthTimeout is its timeout (default
	// DefaultHealthTimeout).
	HealthCheck, HealthTimeout time.Duration
	// MaxOutstanding bounds the requests in flight (default 50,000): an
	// arrival beyond it is not sent, and counted (Stats.Shed).
	MaxOutstanding int
	Seed           uint64
	// Shares: each Envoy is configured for shares (one more connection,
	// its main thread's, with an RTDS stream for the runtime layer Layer,
	// default "bulkhead", and an LRS stream); a request whose route the
	// layer sends to its share cluster passes that cluster's circuit
	// breaker only. One target only (shares need one daemon).
	Shares bool
	Layer  string
	// Poisson sends the requests at exponential intervals (a Poisson
	// stream, every Envoy's part Poisson too) instead of evenly spaced.
	Poisson bool
	// Skew is the part of the requests sent to one busy Envoy, the others
	// sharing the rest evenly (0: every Envoy alike); Shift moves the busy
	// Envoy to the next one every Shift (0: Envoy 0 stays the busy one).
	Skew  float64
	Shift time.Duration
}

func (c Config) withDefaults() Config {
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.Node == "" {
		c.Node = "sim"
	}
	if len(c.Durations) == 0 {
		c.Durations = []DurationShare{{20 * time.Millisecond, 70}, {200 * time.Millisecond, 25}, {2500 * time.Millisecond, 5}}
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = permit.DefaultHeartbeatInterval
	}
	if c.HeartbeatFlush <= 0 {
		c.HeartbeatFlush = c.Heartbeat / 4
	}
	if c.HeartbeatBytes <= 0 {
		c.HeartbeatBytes = 16384
	}
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = time.Second
	}
	if c.Ping == 0 {
		c.Ping = time.Second
	}
	if c.HealthTimeout <= 0 {
		c.HealthTimeout = DefaultHealthTimeout
	}
	if c.MaxOutstanding <= 0 {
		c.MaxOutstanding = 50000
	}
	if c.Spread == "" {
		c.Spread = SpreadRequest
	}
	if c.Layer == "" {
		c.Layer = shares.DefaultLayer
	}
	return c
}

// Spread is how an Envoy's workers spread their traffic over the daemon
// replicas of its bulkhead cluster.
type Spread string

const (
	// SpreadRequest is the shipped cluster's (round robin, Envoy's
	// default): each worker has a connection to every replica (its own
	// connection pools), sends its Checks to them in turn (its own load
	// balancer), and opens each access-log stream on one of them, where it
	// stays: worker i of the mesh (Envoy e, worker w: i = e × workers + w)
	// its release stream on replica i mod K, its heartbeat stream on
	// replica (i+1) mod K. A request's end entry reaches the replica that
	// admitted it one time in K.
	SpreadRequest Spread = "request"
	// SpreadWorker pins worker i to replica i mod K: its one connection,
	// its Checks and both its streams. A request's end entry always
	// reaches the replica that admitted it (no shipped config does this;
	// the best case for what a replica keeps alone).
	SpreadWorker Spread = "worker"
)

// placement is where one worker's traffic goes: the replicas it connects
// to (indices into Config.Targets, in its Checks' round-robin order) and,
// as indices into replicas, the connections its release and heartbeat
// streams open on.
type placement struct {
	replicas           []int
	release, heartbeat int
}

// place is worker i's placement over k replicas.
func (s Spread) place(i, k int) placement {
	if k <= 1 {
		return placement{replicas: []int{0}}
	}
	if s == SpreadWorker {
		return placement{replicas: []int{i % k}}
	}
	p := placement{release: i % k, heartbeat: (i + 1) % k}
	for r := range k {
		p.replicas = append(p.replicas, r)
	}
	return p
}

// valid reports whether s is a known spread.
func (s Spread) valid() bool { return s == SpreadRequest || s == SpreadWorker }

// Mesh is N simulated Envoys. Build it with New, Connect it, Run load
// through it (Run may be called again), then Close it.
type Mesh struct {
	cfg     Config
	t       *templates
	Stats   *Stats
	Caps    *Caps
	pinger  *pinger
	workers []*worker
	agents  []*agent      // by Envoy, with Config.Shares
	health  []*healthConn // by Envoy, then target, with Config.HealthCheck
	routes  weighted[Route]
	mix     weighted[DurationShare]

	nextID      atomic.Uint64
	outstanding atomic.Int64
	epoch       atomic.Int64 // the daemon's generation, bumped by NewEpoch
	oldRunning  atomic.Int64 // admitted before the last NewEpoch, still running

	bg     errgroup.Group // the pinger and the health checker
	stopBg context.CancelFunc

	sharesWG   sync.WaitGroup // the agents' streams
	stopShares context.CancelFunc

	born time.Time // New's time: Config.Shift counts from it
}

// worker is one Envoy worker: its connections to the daemon replicas, its
// Checks (in turn over its connections) and its two access loggers.
type worker struct {
	envoy     int
	node      string
	conns     []*grpc.ClientConn
	authz     []authv3.AuthorizationClient
	next      atomic.Uint64 // its Checks' round robin
	release   *logger
	heartbeat *logger
	md        metadata.MD
	refused   atomic.Int64 // unix nanos of its last Check that failed or timed out
}

// ErrConfig is wrapped by New's errors.
var ErrConfig = errors.New("meshsim config")

// New builds the mesh: one client connection per worker, not yet connected.
func New(cfg Config) (*Mesh, error) {
	cfg = cfg.withDefaults()
	if cfg.Envoys <= 0 || len(cfg.Routes) == 0 || len(cfg.Targets) == 0 || !cfg.Spread.valid() {
		return nil, fmt.Errorf("%w: want Envoys > 0, Routes, Targets and a known Spread", ErrConfig)
	}
	t, err := loadTemplates()
	if err != nil {
		return nil, err
	}
	m := &Mesh{cfg: cfg, t: t, Stats: &Stats{}, pinger: newPinger(), Caps: newCaps(cfg.Routes), born: time.Now()}
	for _, r := range cfg.Routes {
		m.routes.add(r, r.Weight)
	}
	for _, d := range cfg.Durations {
		m.mix.add(d, d.Weight)
	}
	for e := range cfg.Envoys {
		node := fmt.Sprintf("%s-%05d", cfg.Node, e)
		if cfg.HealthCheck > 0 {
			for _, target := range cfg.Targets {
				conn, err := dial(target, m.pinger)
				if err != nil {
					m.Close()
					return nil, err
				}
				m.health = append(m.health, &healthConn{node: node, conn: conn, client: healthpb.NewHealthClient(conn)})
			}
		}
		if cfg.Shares {
			// The main thread's one connection reaches one replica (Envoy e's
			// is replica e mod K, as a Service or bulkhead_xds spreads them):
			// its RTDS and LRS streams both go there.
			conn, err := dial(cfg.Targets[e%len(cfg.Targets)], m.pinger)
			if err != nil {
				m.Close()
				return nil, err
			}
			a := newAgent(node, conn, t.nodeOf(node), cfg.Layer, m.Stats)
			a.idx, a.busy = e, m.busy
			m.agents = append(m.agents, a)
		}
		for w := range cfg.Workers {
			pl := cfg.Spread.place(e*cfg.Workers+w, len(cfg.Targets))
			wk := &worker{envoy: e, node: node, md: metadata.Pairs(NodeMetadata, node)}
			// Appended before dialling: Close closes what was dialled.
			m.workers = append(m.workers, wk)
			for _, r := range pl.replicas {
				conn, err := dial(cfg.Targets[r], m.pinger)
				if err != nil {
					m.Close()
					return nil, err
				}
				wk.conns = append(wk.conns, conn)
				wk.authz = append(wk.authz, authv3.NewAuthorizationClient(conn))
			}
			wk.release = &logger{client: alsv3.NewAccessLogServiceClient(wk.conns[pl.release]),
				ident: func() []byte { return t.identifierField(node, t.release) }, stats: m.Stats}
			wk.heartbeat = wk.release
			if !cfg.SingleLog {
				wk.heartbeat = &logger{client: alsv3.NewAccessLogServiceClient(wk.conns[pl.heartbeat]),
					ident: func() []byte { return t.identifierField(node, t.heartbeat) }, stats: m.Stats, flush: cfg.HeartbeatFlush, maxBytes: cfg.HeartbeatBytes}
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.stopBg = cancel
	if cfg.Ping > 0 {
		m.bg.Go(func() error { m.pinger.run(ctx, cfg.Ping); return nil })
	}
	if len(m.health) > 0 {
		m.bg.Go(func() error { m.runHealth(ctx, cfg.HealthCheck, cfg.HealthTimeout); return nil })
	}
	return m, nil
}

// HealthConnections is the number of health-check connections (Envoys ×
// targets with Config.HealthCheck, else 0).
func (m *Mesh) HealthConnections() int { return len(m.health) }

// Connections is the number of client connections but the health checks'
// (Envoys × workers, times the replicas with SpreadRequest, plus one per
// Envoy with shares).
func (m *Mesh) Connections() int {
	n := len(m.agents)
	for _, w := range m.workers {
		n += len(w.conns)
	}
	return n
}

// Connect connects every connection (the workers', and the main thread's
// and the health checks' if any), at most parallel at a time, and waits
// until all are ready or ctx ends.
func (m *Mesh) Connect(ctx context.Context, parallel int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, parallel))
	connect := func(node string, conn *grpc.ClientConn) {
		g.Go(func() error {
			conn.Connect()
			for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
				if !conn.WaitForStateChange(ctx, s) {
					return fmt.Errorf("connecting %s: %w", node, ctx.Err())
				}
				conn.Connect()
			}
			return nil
		})
	}
	for _, a := range m.agents {
		connect(a.node, a.conn)
	}
	for _, h := range m.health {
		connect(h.node, h.conn)
	}
	for _, w := range m.workers {
		for _, conn := range w.conns {
			connect(w.node, conn)
		}
	}
	return g.Wait()
}

// Close closes every stream and connection.
func (m *Mesh) Close() {
	if m.stopBg != nil {
		m.stopBg()
		_ = m.bg.Wait()
	}
	if m.stopShares != nil {
		m.stopShares()
	}
	m.sharesWG.Wait()
	for _, a := range m.agents {
		_ = a.conn.Close()
	}
	for _, h := range m.health {
		_ = h.conn.Close()
	}
	for _, w := range m.workers {
		if w.release != nil {
			w.release.close()
			if w.heartbeat != w.release {
				w.heartbeat.close()
			}
		}
		for _, conn := range w.conns {
			_ = conn.Close()
		}
	}
}

// NewEpoch marks the requests running now as admitted by the daemon's
// previous process (call it before the daemon restarts); OldRunning counts
// those still running.
func (m *Mesh) NewEpoch() {
	m.epoch.Add(1)
	m.oldRunning.Store(m.Caps.Running())
}

// OldRunning is the number of requests admitted before the last NewEpoch
// that still run.
func (m *Mesh) OldRunning() int64 { return m.oldRunning.Load() }

// Pings is the number of PINGs sent.
func (m *Mesh) Pings() int64 {
	m.pinger.mu.Lock()
	defer m.pinger.mu.Unlock()
	return m.pinger.sent
}

// LastRefused returns, per Envoy that had one, the time of its last Check
// that failed (a gRPC error: Envoy's status_on_error) or ended in the
// daemon's timeout denial.
func (m *Mesh) LastRefused() map[int]time.Time {
	out := map[int]time.Time{}
	for _, w := range m.workers {
		if ns := w.refused.Load(); ns != 0 {
			t := time.Unix(0, ns)
			if t.After(out[w.envoy]) {
				out[w.envoy] = t
			}
		}
	}
	return out
}

// Run sends requests at rate per second for d, spread uniformly over the
// workers, then waits for the requests in flight to end (or ctx). Streams
// opened meanwhile stay open (they live as long as streamCtx). Every loop is
// bounded: at most MaxOutstanding requests run at once.
func (m *Mesh) Run(ctx, streamCtx context.Context, rate float64, d time.Duration, routes ...Route) {
	rng := rand.New(rand.NewPCG(m.cfg.Seed, m.nextID.Load()))
	pick := &m.routes
	if len(routes) > 0 {
		pick = &weighted[Route]{}
		for _, r := range routes {
			pick.add(r, r.Weight)
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent := 0
	arrival := start // with Poisson: the next request's time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			el := now.Sub(start)
			if el >= d {
				return
			}
			due := int(rate * el.Seconds())
			if m.cfg.Poisson {
				for due = sent; !arrival.After(now); due++ {
					arrival = arrival.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
				}
			}
			for ; sent < due; sent++ {
				if m.outstanding.Load() >= int64(m.cfg.MaxOutstanding) {
					m.Stats.Shed.Add(1)
					continue
				}
				r := m.newRequest(rng, pick)
				w := m.pickWorker(rng, now)
				m.outstanding.Add(1)
				m.Stats.Issued.Add(1)
				wg.Go(func() {
					defer m.outstanding.Add(-1)
					m.do(ctx, streamCtx, w, r)
				})
			}
		}
	}
}

// pickWorker picks the worker of a request sent at now: any, or with
// Config.Skew one of the busy Envoy's with that probability.
func (m *Mesh) pickWorker(rng *rand.Rand, now time.Time) *worker {
	n := m.cfg.Envoys
	if m.cfg.Skew <= 0 || n < 2 {
		return m.workers[rng.IntN(len(m.workers))]
	}
	e := m.busy(now)
	if rng.Float64() >= m.cfg.Skew {
		e = (e + 1 + rng.IntN(n-1)) % n
	}
	return m.workers[e*m.cfg.Workers+rng.IntN(m.cfg.Workers)]
}

// busy is the busy Envoy at now (Config.Skew, Config.Shift); -1 without
// skew.
func (m *Mesh) busy(now time.Time) int {
	switch {
	case m.cfg.Skew <= 0 || m.cfg.Envoys < 2:
		return -1
	case m.cfg.Shift <= 0:
		return 0
	}
	return int(now.Sub(m.born)/m.cfg.Shift) % m.cfg.Envoys
}

func (m *Mesh) newRequest(rng *rand.Rand, routes *weighted[Route]) *request {
	r := &request{id: m.nextID.Add(1), bulkhead: routes.pick(rng).Bulkhead, duration: m.mix.pick(rng).Duration}
	if n := len(m.cfg.Priorities); n > 0 {
		r.priority = m.cfg.Priorities[rng.IntN(n)]
	}
	if m.cfg.Tenants > 0 {
		r.tenant = fmt.Sprintf("tenant-%04d", rng.IntN(m.cfg.Tenants))
	}
	return r
}

// do is one request: its Check; if admitted, its run with a periodic entry
// each heartbeat interval from its start; then its end entry. A request
// cut short by ctx still sends its end entry (its Envoy is alive). It
// reports whether the request was admitted.
func (m *Mesh) do(ctx, streamCtx context.Context, w *worker, r *request) bool {
	if m.agents != nil {
		if share, admitted := m.doShare(ctx, m.agents[w.envoy], r); share {
			return admitted
		}
	}
	r.start = time.Now()
	cctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, w.md), m.cfg.CheckTimeout)
	authz := w.authz[(w.next.Add(1)-1)%uint64(len(w.authz))]
	resp, err := authz.Check(cctx, m.t.checkRequest(r), grpc.WaitForReady(true))
	cancel()
	now := time.Now()
	limited := m.Caps.limit[r.bulkhead] > 0 // read only: set once by newCaps
	if err != nil {
		m.Stats.checkError(status.Code(err).String(), status.Convert(err).Message())
		w.refused.Store(now.UnixNano())
		m.Stats.timeline.add(now, false)
		return false
	}
	if !limited {
		// A limited bulkhead's Checks wait in its queue: their latency is
		// the limiter's, not the daemon's cost.
		m.Stats.checkLatency.add(now.Sub(r.start))
	} else {
		m.Stats.limitedLatency.add(now.Sub(r.start))
	}
	if resp.GetStatus().GetCode() != 0 {
		m.Stats.Denied.Add(1)
		if !limited {
			// Nothing but a restart's recovery window refuses these.
			w.refused.Store(now.UnixNano())
		}
		return false
	}
	r.admitted = now
	m.Stats.ChecksOK.Add(1)
	m.Stats.timeline.add(now, true)
	r.token = resp.GetDynamicMetadata().GetFields()[permit.MetadataToken].GetStringValue()
	epoch := m.epoch.Load()
	m.Caps.enter(r.bulkhead)
	end := r.start.Add(r.duration)
	next := r.start.Add(m.cfg.Heartbeat)
	timer := time.NewTimer(time.Until(earliest(end, next)))
	for {
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		now := time.Now()
		if ctx.Err() != nil || !now.Before(end) {
			break
		}
		if !now.Before(next) {
			w.heartbeat.log(streamCtx, m.t.periodicEntry(r, now))
			m.Stats.PeriodicSent.Add(1)
			next = next.Add(m.cfg.Heartbeat)
		}
		timer.Reset(time.Until(earliest(end, next)))
	}
	timer.Stop()
	if m.epoch.Load() != epoch {
		m.oldRunning.Add(-1)
	}
	m.Caps.leave(r.bulkhead)
	w.release.log(streamCtx, m.t.endEntry(r, time.Now()))
	m.Stats.EndSent.Add(1)
	return true
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// weighted picks values by weight (a weight <= 0 counts as 1).
type weighted[T any] struct {
	vals []T
	cum  []float64
}

func (w *weighted[T]) add(v T, weight float64) {
	if weight <= 0 {
		weight = 1
	}
	total := weight
	if n := len(w.cum); n > 0 {
		total += w.cum[n-1]
	}
	w.vals, w.cum = append(w.vals, v), append(w.cum, total)
}

func (w *weighted[T]) pick(rng *rand.Rand) T {
	x := rng.Float64() * w.cum[len(w.cum)-1]
	for i, c := range w.cum {
		if x < c {
			return w.vals[i]
		}
	}
	return w.vals[len(w.vals)-1]
}
