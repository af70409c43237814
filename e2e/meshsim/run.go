package meshsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// Plan is one measurement series.
type Plan struct {
	Ns        []int         `json:"envoys"`
	Workers   int           `json:"workers"`
	Rate      float64       `json:"rate"` // Checks per second, every Envoy together
	Bulkheads int           `json:"bulkheads"`
	Tenants   int           `json:"tenants"`
	Warmup    time.Duration `json:"warmup_ns"`
	Window    time.Duration `json:"window_ns"`
	PrimeRate float64       `json:"prime_rate"` // the requests that open every worker's streams, per second
	Storm     bool          `json:"storm"`      // the reconnect storm at the largest N
	// StormBurst: in the storm, every worker sends a request within the
	// second after the restart.
	StormBurst bool          `json:"storm_burst"`
	Steady     time.Duration `json:"steady_ns"` // the steady run's length (0: none)
	SteadyN    int           `json:"steady_envoys"`
	// Ping is the Envoys' connection keepalive interval (0: the shipped 1 s;
	// < 0: none).
	Ping time.Duration `json:"ping_ns"`
	// Health is the Envoys' active gRPC health check of each daemon (0: as
	// the shipped configs, DefaultHealthCheck with a shared ledger, whose
	// replicas they health-check, none on one in-memory daemon; < 0: none;
	// > 0: that interval, whatever the ledger). See healthCheck.
	Health time.Duration `json:"health_check_ns"`
	// SingleLog: one access-log stream per worker (Config.SingleLog).
	SingleLog bool `json:"single_log,omitempty"`
	// RecoveryWindow is the daemon's leases.recovery_window (its default).
	RecoveryWindow time.Duration `json:"recovery_window_ns"`
	// Limited: every fourth bulkhead has a limit of 4; else none has a
	// limit the load reaches.
	Limited bool `json:"limited"`
	// Ledger is the daemons' ledger; Replicas the daemons behind the
	// Envoys' one bulkhead cluster, which the Envoys Spread over.
	Ledger   Ledger `json:"ledger"`
	Replicas int    `json:"replicas"`
	Spread   Spread `json:"spread"`
	// Shares is every bulkhead's shares mode ("shares" or "auto"; "":
	// strict), the Envoys configured for shares (Config.Shares).
	Shares string `json:"shares,omitempty"`
	// IdleWindow, if positive, is a window measured before the warm-up,
	// with every Envoy connected (its streams open) and no requests.
	IdleWindow time.Duration `json:"idle_window_ns,omitempty"`
	// DaemonBin is the daemon binary run ("": cmd/bulkhead built from
	// this module).
	DaemonBin string `json:"daemon_binary,omitempty"`
	// Limit, if positive, is every bulkhead's limit (instead of Limited's);
	// Durations the request durations' mix (none: Config's default);
	// Poisson, Skew and Shift as in Config.
	Limit     int             `json:"limit,omitempty"`
	Durations []DurationShare `json:"durations,omitempty"`
	Poisson   bool            `json:"poisson,omitempty"`
	Skew      float64         `json:"skew,omitempty"`
	Shift     time.Duration   `json:"shift_ns,omitempty"`
	// Load, if positive, is the load as a part of the limit: the mean
	// requests in flight it sets Rate for (Little's law).
	Load float64 `json:"load,omitempty"`
	// DaemonCPUs and SimCPUs, if set, are the CPUs the daemons and the
	// simulator run on (taskset -c lists; pin.go). Children the simulator
	// starts other than the daemons (redis-server, Envoy) run on SimCPUs;
	// with SimCPUs and no DaemonCPUs, the daemons run on every CPU.
	DaemonCPUs string `json:"daemon_cpus,omitempty"`
	SimCPUs    string `json:"simulator_cpus,omitempty"`
}

// Routes are the plan's bulkheads: with Limited, every fourth has a limit
// of 4 (its cap is checked); the others none the load reaches (tenant
// compartments when there are tenants). The priming requests' bulkhead,
// "warmup", is not among them.
func (p Plan) Routes() []Route {
	var rs []Route
	for i := range p.Bulkheads {
		r := Route{Bulkhead: fmt.Sprintf("bh-%03d", i)}
		if p.Limited && i%4 == 0 {
			r.Limit = 4
		}
		if p.Limit > 0 {
			r.Limit = p.Limit
		}
		r.Shares = p.Shares
		rs = append(rs, r)
	}
	return rs
}

const warmupBulkhead = "warmup"

// Result is one N's figures.
type Result struct {
	Envoys         int     `json:"envoys"`
	Connections    int     `json:"connections"`
	Streams        float64 `json:"access_log_streams"` // the daemon's gauge at the window's end
	IdleRSS        int64   `json:"idle_rss_bytes"`     // before any Envoy connected
	RSS            int64   `json:"rss_bytes"`          // at the window's end
	IdleGoroutines float64 `json:"idle_goroutines"`
	Goroutines     float64 `json:"goroutines"`
	HeapInuse      float64 `json:"heap_inuse_bytes"`
	StackInuse     float64 `json:"stack_inuse_bytes"`
	// NextGC is the heap goal (with GOGC 100: the live heap after the last
	// GC plus as much again, plus the scanned stacks and globals).
	NextGC float64 `json:"next_gc_bytes"`
	// ByCreator counts the daemon's goroutines by creator at the end of
	// the run (after the storm, if any): from its SIGQUIT traceback.
	ByCreator []Count `json:"goroutines_by_creator,omitempty"`
	Checks    int64   `json:"checks"` // answered in the window
	Admitted  int64   `json:"admitted"`
	Errors    int64   `json:"check_errors"`
	Shed      int64   `json:"not_sent_at_bound"`
	CheckP50  float64 `json:"check_p50_ms"`
	CheckP99  float64 `json:"check_p99_ms"`
	// Of the bulkheads with a limit (-limit, -limited): queueing included.
	LimitedP50     float64   `json:"check_limited_p50_ms"`
	LimitedP99     float64   `json:"check_limited_p99_ms"`
	LagP99         float64   `json:"release_lag_p99_ms"`
	Lags           float64   `json:"release_lags"`
	CPUPerRequest  float64   `json:"cpu_us_per_request"` // daemon CPU over the window / Checks answered
	CPUShare       float64   `json:"cpu_cores"`          // daemon CPU / wall time in the window
	ConnectSeconds float64   `json:"connect_s"`
	Pings          int64     `json:"pings"`
	Caps           CapReport `json:"caps"`
	EntriesDropped int64     `json:"entries_dropped"`
	// HealthConnections are the Envoys' health-check connections (not in
	// Connections); HealthChecks the health Checks answered SERVING in the
	// window, HealthFailed those that failed or timed out.
	HealthConnections int   `json:"health_connections,omitempty"`
	HealthChecks      int64 `json:"health_checks,omitempty"`
	HealthFailed      int64 `json:"health_checks_failed,omitempty"`
	// Ledger is the shared ledger's cost in the window (nil in memory).
	Ledger *LedgerCost `json:"ledger,omitempty"`
	// Requests are the requests the Envoys answered in the window: the
	// Checks answered and, with shares, the requests their share clusters'
	// circuit breakers admitted (SharesAdmitted) or overflowed.
	Requests       int64 `json:"requests"`
	SharesAdmitted int64 `json:"shares_admitted,omitempty"`
	SharesOverflow int64 `json:"shares_overflowed,omitempty"`
	RTDSResponses  int64 `json:"rtds_responses,omitempty"` // received in the window
	LRSReports     int64 `json:"lrs_reports,omitempty"`    // sent in the window
	// SharesHeld and SharesLimit: the permits the daemon holds for shares
	// and the Σ max_requests it last told, at the window's end.
	SharesHeld  float64 `json:"shares_permits,omitempty"`
	SharesLimit float64 `json:"shares_limit,omitempty"`
	// Of the share requests, those of the busy Envoy (Plan.Skew); the
	// Envoys' load reports in the window (ShareSample); the Checks denied.
	BusyAdmitted int64         `json:"busy_shares_admitted,omitempty"`
	BusyOverflow int64         `json:"busy_shares_overflowed,omitempty"`
	Samples      []ShareSample `json:"share_samples,omitempty"`
	Denied       int64         `json:"checks_denied"`
	// WindowSeconds is the window's wall time (its load, then the
	// requests in flight ending).
	WindowSeconds float64 `json:"window_s"`
	// CPUPerEnvoy is the daemon's CPU per Envoy per second of the window.
	CPUPerEnvoy float64 `json:"cpu_us_per_envoy_s"`
	// Idle is the idle window's figures (Plan.IdleWindow), if any.
	Idle *Idle `json:"idle,omitempty"`
	// PrimedStreams are the access-log streams open once the priming
	// requests were answered, PrimeErrors the Checks that failed while
	// they ran (each tried up to 3 times).
	PrimedStreams int64 `json:"primed_streams"`
	PrimeErrors   int64 `json:"prime_check_errors"`
	// SimCPUShare is the simulator's own CPU in the window, in cores.
	SimCPUShare float64 `json:"simulator_cpu_cores"`
	// DaemonAffinity (the first replica's) and SimAffinity are where the
	// threads may run, read at the window's end.
	DaemonAffinity *Affinity `json:"daemon_affinity,omitempty"`
	SimAffinity    *Affinity `json:"simulator_affinity,omitempty"`
}

// Idle is a window with every Envoy connected and no requests.
type Idle struct {
	Seconds       float64 `json:"s"`
	CPUShare      float64 `json:"cpu_cores"`
	CPUPerEnvoy   float64 `json:"cpu_us_per_envoy_s"`
	RTDSResponses int64   `json:"rtds_responses"`
	LRSReports    int64   `json:"lrs_reports"`
	RSS           int64   `json:"rss_bytes"`
}

// RSSPerEnvoy is the daemon's resident memory above its idle figure, per
// connected Envoy.
func (r Result) RSSPerEnvoy() float64 { return float64(r.RSS-r.IdleRSS) / float64(r.Envoys) }

// GoroutinesPerStream is the goroutines above the idle figure per open
// access-log stream.
func (r Result) GoroutinesPerStream() float64 {
	if r.Streams == 0 {
		return 0
	}
	return (r.Goroutines - r.IdleGoroutines) / r.Streams
}

// Storm is the reconnect storm's figures.
type Storm struct {
	Envoys          int       `json:"envoys"`
	RestartSeconds  float64   `json:"restart_s"` // kill to the new process's listeners
	OldRunning      int64     `json:"old_running_at_window_end"`
	Adopted         float64   `json:"adopted_at_window_end"`
	AdoptedTotal    float64   `json:"adopted_total"`
	FirstAdmitAfter float64   `json:"first_admission_after_start_s"`
	LastRefusal     float64   `json:"last_refusal_after_start_s"` // the latest any Envoy's Check failed
	RefusedLate     int       `json:"envoys_refused_after_window_plus_1s"`
	Errors          int64     `json:"check_errors"`
	StreamsReopened int64     `json:"streams_opened"`
	PeakRSS         int64     `json:"peak_rss_bytes"`
	Caps            CapReport `json:"caps"`
	Window          float64   `json:"recovery_window_s"`
	// ErrorCodes are the storm's failed Checks by gRPC code, as the
	// simulator saw them; Daemon what the new process answered: admitted,
	// rejected by reason, cancelled (the Check's caller gave up first).
	ErrorCodes map[string]int64   `json:"check_errors_by_code"`
	Daemon     map[string]float64 `json:"daemon_answers"`
}

// Steady is the steady run: memory and goroutines sampled over time.
type Steady struct {
	Envoys  int       `json:"envoys"`
	Minutes []float64 `json:"minutes"`
	RSS     []int64   `json:"rss_bytes"`
	Heap    []float64 `json:"heap_inuse_bytes"`
	Gor     []float64 `json:"goroutines"`
}

// Results is a whole series.
type Results struct {
	Plan    Plan         `json:"plan"`
	Started time.Time    `json:"started"`
	Load    string       `json:"load_average_at_start"`
	Runs    []Result     `json:"runs"`
	Storm   *Storm       `json:"storm,omitempty"`
	Steady  *Steady      `json:"steady,omitempty"`
	Calib   *Calibration `json:"calibration,omitempty"`
	Notes   []string     `json:"notes,omitempty"`
}

// series runs plan against a daemon built from this module.
type series struct {
	log  *slog.Logger
	bin  string
	dir  string
	plan Plan
}

func (s *series) config(grpcAddr, ledger string) string {
	return DaemonConfig(grpcAddr, append(s.plan.Routes(), Route{Bulkhead: warmupBulkhead}), s.plan.Tenants > 0, ledger)
}

// cluster starts the plan's daemons for the run name (and their Redis).
func (s *series) cluster(ctx context.Context, name string) (*cluster, error) {
	cpus := s.plan.DaemonCPUs
	if cpus == "" && s.plan.SimCPUs != "" {
		// A child inherits the simulator's CPUs: unpinned is every CPU.
		var err error
		if cpus, err = onlineCPUs(); err != nil {
			return nil, err
		}
	}
	return startCluster(ctx, s.bin, s.dir, name, max(1, s.plan.Replicas), s.plan.Ledger, s.config, OnCPUs(cpus))
}

func (s *series) meshConfig(targets []string, n int) Config {
	return Config{Targets: targets, Spread: s.plan.Spread, Envoys: n, Workers: s.plan.Workers, Routes: s.plan.Routes(),
		Tenants: s.plan.Tenants, Priorities: []string{"", "", "critical", "best_effort"}, Seed: uint64(n), Ping: s.plan.Ping, SingleLog: s.plan.SingleLog,
		Shares: s.plan.Shares != "", HealthCheck: s.plan.healthCheck(), Durations: s.plan.Durations, Poisson: s.plan.Poisson, Skew: s.plan.Skew, Shift: s.plan.Shift}
}

// runN measures the daemons with n Envoys; with storm, the reconnect storm
// follows the window (one replica only).
func (s *series) runN(ctx context.Context, n int, storm bool) (Result, *Storm, error) {
	res := Result{Envoys: n}
	c, err := s.cluster(ctx, fmt.Sprintf("n%d", n))
	if err != nil {
		return res, nil, err
	}
	defer c.stop()
	started, err := c.read(ctx)
	if err != nil {
		return res, nil, err
	}
	if err := sleep(ctx, s.plan.pause()+time.Second); err != nil {
		return res, nil, err
	}
	idle, err := c.read(ctx)
	if err != nil {
		return res, nil, err
	}
	res.IdleRSS, res.IdleGoroutines = idle.usage.RSS, idle.scrape.value("go_goroutines")

	m, err := New(s.meshConfig(c.targets(), n))
	if err != nil {
		return res, nil, err
	}
	defer m.Close()
	res.Connections, res.HealthConnections = m.Connections(), m.HealthConnections()
	streamCtx, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	t0 := time.Now()
	if err := m.Connect(ctx, 256); err != nil {
		return res, nil, err
	}
	res.ConnectSeconds = time.Since(t0).Seconds()
	s.log.Info("connected", "envoys", n, "connections", res.Connections, "s", res.ConnectSeconds)
	if err := s.startShares(ctx, streamCtx, m); err != nil {
		return res, nil, err
	}
	primeErr0 := m.Stats.Errored.Load()
	s.prime(ctx, streamCtx, m, s.plan.PrimeRate, 3)
	res.PrimedStreams, res.PrimeErrors = m.Stats.StreamsOpened.Load(), m.Stats.Errored.Load()-primeErr0
	s.log.Info("streams primed", "envoys", n, "opened", m.Stats.StreamsOpened.Load(), "stream_errors", m.Stats.StreamErrors.Load(),
		"check_errors", m.Stats.ErrorCodes(), "denied", m.Stats.Denied.Load(), "entries_dropped", m.Stats.EntriesDropped.Load())
	if s.plan.IdleWindow > 0 {
		if res.Idle, err = s.idle(ctx, c, m, n); err != nil {
			return res, nil, err
		}
	}
	m.Run(ctx, streamCtx, s.plan.Rate, s.plan.Warmup)

	_, _ = m.Stats.TakeCheckLatencies(), m.Stats.TakeLimitedLatencies()
	before, err := c.read(ctx)
	if err != nil {
		return res, nil, err
	}
	ok0, den0, err0, shed0, pings0 := m.Stats.ChecksOK.Load(), m.Stats.Denied.Load(), m.Stats.Errored.Load(), m.Stats.Shed.Load(), m.Pings()
	hok0, hfail0 := m.Stats.HealthOK.Load(), m.Stats.HealthFailed.Load()
	sh0, ov0, rtds0, lrs0 := m.Stats.SharesAdmitted.Load(), m.Stats.SharesOverflow.Load(), m.Stats.RTDSResponses.Load(), m.Stats.LRSReports.Load()
	bsh0, bov0 := m.Stats.BusyAdmitted.Load(), m.Stats.BusyOverflow.Load()
	_ = m.TakeShareSamples()
	self0, err := procUsage(os.Getpid())
	if err != nil {
		return res, nil, err
	}
	m.Run(ctx, streamCtx, s.plan.Rate, s.plan.Window)
	self1, err := procUsage(os.Getpid())
	if err != nil {
		return res, nil, err
	}
	res.Samples = m.TakeShareSamples()
	res.BusyAdmitted, res.BusyOverflow = m.Stats.BusyAdmitted.Load()-bsh0, m.Stats.BusyOverflow.Load()-bov0
	after, err := c.read(ctx)
	if err != nil {
		return res, nil, err
	}
	wall := after.at.Sub(before.at)
	lat := m.Stats.TakeCheckLatencies()
	res.Admitted = m.Stats.ChecksOK.Load() - ok0
	res.Denied = m.Stats.Denied.Load() - den0
	res.Checks = res.Admitted + res.Denied
	res.Errors = m.Stats.Errored.Load() - err0
	res.Shed = m.Stats.Shed.Load() - shed0
	res.Pings = m.Pings() - pings0
	res.HealthChecks, res.HealthFailed = m.Stats.HealthOK.Load()-hok0, m.Stats.HealthFailed.Load()-hfail0
	res.CheckP50 = ms(quantile(lat, 0.50))
	res.CheckP99 = ms(quantile(lat, 0.99))
	limLat := m.Stats.TakeLimitedLatencies()
	res.LimitedP50, res.LimitedP99 = ms(quantile(limLat, 0.50)), ms(quantile(limLat, 0.99))
	const lagName = "bulkhead_permit_release_lag_seconds"
	lag, lags := after.scrape.histogram(lagName).quantileSince(before.scrape.histogram(lagName), 0.99)
	res.LagP99, res.Lags = lag*1000, lags
	res.SharesAdmitted, res.SharesOverflow = m.Stats.SharesAdmitted.Load()-sh0, m.Stats.SharesOverflow.Load()-ov0
	res.RTDSResponses, res.LRSReports = m.Stats.RTDSResponses.Load()-rtds0, m.Stats.LRSReports.Load()-lrs0
	res.Requests = res.Checks + res.SharesAdmitted + res.SharesOverflow
	cpu := after.usage.CPU - before.usage.CPU
	if res.Requests > 0 {
		res.CPUPerRequest = float64(cpu.Microseconds()) / float64(res.Requests)
	}
	res.CPUShare = cpu.Seconds() / wall.Seconds()
	res.SimCPUShare = (self1.CPU - self0.CPU).Seconds() / wall.Seconds()
	res.WindowSeconds = wall.Seconds()
	if a, err := c.daemons[0].Affinity(); err == nil {
		res.DaemonAffinity = &a
	}
	if a, err := threadCPUs(os.Getpid()); err == nil {
		res.SimAffinity = &a
	}
	res.CPUPerEnvoy = float64(cpu.Microseconds()) / wall.Seconds() / float64(n)
	am := after.scrape
	res.RSS, res.Goroutines = after.usage.RSS, am.value("go_goroutines")
	res.HeapInuse = am.value("go_memstats_heap_inuse_bytes")
	res.StackInuse = am.value("go_memstats_stack_inuse_bytes")
	res.NextGC = am.value("go_memstats_next_gc_bytes")
	res.Streams = am.value("bulkhead_access_log_streams")
	res.SharesHeld, res.SharesLimit = am.sum("bulkhead_shares_permits"), am.sum("bulkhead_shares_limit")
	res.Caps = m.Caps.Report()
	res.EntriesDropped = m.Stats.EntriesDropped.Load()
	if res.Ledger = ledgerCost(before, after, res.Admitted, res.Checks, c.floor); res.Ledger != nil {
		res.Ledger.RedisIdleCPU = redisCPURate(started, idle)
	}
	s.log.Info("measured", "envoys", n, "rss_mib", res.RSS>>20, "goroutines", res.Goroutines, "streams", res.Streams,
		"check_p99_ms", res.CheckP99, "lag_p99_ms", res.LagP99, "cpu_us", res.CPUPerRequest, "checks", res.Checks,
		"cpu_us_per_envoy_s", res.CPUPerEnvoy, "shares_admitted", res.SharesAdmitted, "shares_overflowed", res.SharesOverflow,
		"rtds_responses", res.RTDSResponses, "lrs_reports", res.LRSReports, "shares_stream_errors", m.Stats.SharesStreamErrors.Load(),
		"pings", res.Pings, "health_connections", res.HealthConnections, "health_checks", res.HealthChecks, "health_failed", res.HealthFailed,
		"simulator_cpu_cores", res.SimCPUShare, "daemon_affinity", res.DaemonAffinity, "simulator_affinity", res.SimAffinity)
	if l := res.Ledger; l != nil {
		s.log.Info("ledger", "envoys", n, "calls_per_admitted", l.CallsPerAdmitted, "by_op", l.Calls, "failed", l.Failed,
			"scripts_per_admitted", l.ScriptsPerAdmitted, "script_us_per_admitted", l.ScriptUsPerAdmitted, "redis_cpu_us_per_admitted", l.RedisCPUPerAdmitted,
			"redis_cpu_us_per_admitted_above_bare", l.RedisCPUAboveBare, "redis_cpu_ms_per_1k", l.RedisCPUPer1k,
			"from_leases", l.FromLeases, "redis_idle_cpu_ms_per_s", l.RedisIdleCPU, "redis_bare_cpu_ms_per_s", l.RedisBareCPU)
	}
	var st *Storm
	if storm {
		if st, err = s.storm(ctx, streamCtx, c.daemons[0], m); err != nil {
			return res, nil, err
		}
	}
	if res.ByCreator, err = c.dumpGoroutines(); err != nil {
		return res, st, err
	}
	return res, st, nil
}

// startShares opens the Envoys' RTDS and LRS streams (with shares) and
// waits, 20 s at most, until each Envoy applied a layer.
func (s *series) startShares(ctx, streamCtx context.Context, m *Mesh) error {
	if !m.cfg.Shares {
		return nil
	}
	m.RunShares(streamCtx)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := m.WaitShares(wctx); err != nil {
		return err
	}
	s.log.Info("every Envoy has its runtime layer", "s", time.Since(t0).Seconds())
	return nil
}

// idle measures the daemons for the plan's idle window: n Envoys
// connected, no requests.
func (s *series) idle(ctx context.Context, c *cluster, m *Mesh, n int) (*Idle, error) {
	before, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	rtds0, lrs0 := m.Stats.RTDSResponses.Load(), m.Stats.LRSReports.Load()
	if err := sleep(ctx, s.plan.IdleWindow); err != nil {
		return nil, err
	}
	after, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	wall := after.at.Sub(before.at)
	cpu := after.usage.CPU - before.usage.CPU
	out := &Idle{Seconds: wall.Seconds(), CPUShare: cpu.Seconds() / wall.Seconds(),
		CPUPerEnvoy:   float64(cpu.Microseconds()) / wall.Seconds() / float64(n),
		RTDSResponses: m.Stats.RTDSResponses.Load() - rtds0, LRSReports: m.Stats.LRSReports.Load() - lrs0, RSS: after.usage.RSS}
	s.log.Info("idle", "envoys", n, "cpu_cores", out.CPUShare, "cpu_us_per_envoy_s", out.CPUPerEnvoy,
		"rtds_responses", out.RTDSResponses, "lrs_reports", out.LRSReports, "rss_mib", out.RSS>>20)
	return out, nil
}

// prime sends one request per worker, on the warmup bulkhead, long enough
// for one periodic entry: it opens the worker's two access-log streams, as
// a mesh that has run for a while has them open. Spread at rate; a request
// whose Check failed is tried again, tries times in all.
func (s *series) prime(ctx, streamCtx context.Context, m *Mesh, rate float64, tries int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	gap := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	for _, w := range m.workers {
		if sleep(ctx, time.Until(next)) != nil {
			return
		}
		next = next.Add(gap)
		m.outstanding.Add(1)
		wg.Go(func() {
			defer m.outstanding.Add(-1)
			// A Check that failed (the daemon busy with thousands of
			// streams opening) is tried again.
			for range tries {
				r := &request{id: m.nextID.Add(1), bulkhead: warmupBulkhead, duration: m.cfg.Heartbeat + m.cfg.HeartbeatFlush + 100*time.Millisecond}
				if m.do(ctx, streamCtx, w, r) || ctx.Err() != nil {
					return
				}
			}
		})
	}
}

// storm restarts the daemon (SIGKILL, then at once a new process on the
// same address) while the load runs, and watches the recovery.
func (s *series) storm(ctx, streamCtx context.Context, d *Daemon, m *Mesh) (*Storm, error) {
	st := &Storm{Envoys: len(m.workers) / max(1, s.plan.Workers), Window: s.plan.RecoveryWindow.Seconds()}
	loadFor := 4*time.Second + s.plan.RecoveryWindow + 6*time.Second
	var wg sync.WaitGroup
	wg.Go(func() { m.Run(ctx, streamCtx, s.plan.Rate, loadFor) })
	defer wg.Wait()
	if err := sleep(ctx, 4*time.Second); err != nil {
		return nil, err
	}
	opened0, err0, codes0 := m.Stats.StreamsOpened.Load(), m.Stats.Errored.Load(), m.Stats.ErrorCodes()
	m.NewEpoch()
	k := time.Now()
	s.log.Info("storm: killing and restarting the daemon", "running", m.OldRunning())
	if err := d.Restart(ctx); err != nil {
		return nil, err
	}
	st.RestartSeconds = time.Since(k).Seconds()
	if s.plan.StormBurst {
		// A busy mesh: every worker has a request within the second after
		// the restart, so every connection comes back at once, and every
		// access-log stream reopens (a 61 KB identifier each) as those
		// requests log.
		wg.Go(func() { s.prime(ctx, streamCtx, m, float64(len(m.workers)), 1) })
	}
	windowEnd := d.Started.Add(s.plan.RecoveryWindow)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(windowEnd.Add(5 * time.Second)) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		if u, err := d.Usage(); err == nil {
			st.PeakRSS = max(st.PeakRSS, u.RSS)
		}
		if st.OldRunning == 0 && st.Adopted == 0 && time.Now().After(windowEnd.Add(-100*time.Millisecond)) {
			mm, err := d.Metrics(ctx)
			if err != nil {
				continue
			}
			st.OldRunning, st.Adopted = m.OldRunning(), sumOf(mm, "bulkhead_permits_adopted_total")
		}
	}
	mm, err := d.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	st.AdoptedTotal = sumOf(mm, "bulkhead_permits_adopted_total")
	if f, ok := m.Stats.FirstOKAfter(d.Started); ok {
		st.FirstAdmitAfter = f.Seconds()
	} else {
		st.FirstAdmitAfter = -1
	}
	late := windowEnd.Add(time.Second)
	for _, t := range m.LastRefused() {
		if t.After(d.Started) {
			st.LastRefusal = max(st.LastRefusal, t.Sub(d.Started).Seconds())
		}
		if t.After(late) {
			st.RefusedLate++
		}
	}
	st.Errors = m.Stats.Errored.Load() - err0
	st.ErrorCodes = m.Stats.ErrorCodes()
	for c, n := range codes0 {
		st.ErrorCodes[c] -= n
	}
	st.Daemon = map[string]float64{"admitted": sumOf(mm, "bulkhead_admitted_total"),
		"cancelled": sumOf(mm, "bulkhead_cancelled_total")}
	for _, smp := range mm.Samples("bulkhead_rejected_total") {
		st.Daemon["rejected_"+smp.Labels["reason"]] += smp.Value
	}
	st.StreamsReopened = m.Stats.StreamsOpened.Load() - opened0
	st.Caps = m.Caps.Report()
	s.log.Info("storm", "restart_s", st.RestartSeconds, "old_running", st.OldRunning, "adopted", st.Adopted,
		"first_admission_s", st.FirstAdmitAfter, "last_refusal_s", st.LastRefusal, "caps_over", st.Caps.Violations,
		"errors", st.ErrorCodes, "daemon", st.Daemon, "error_samples", m.Stats.ErrorSamples())
	return st, nil
}

// steady runs the load at n Envoys for d, sampling the daemon each minute
// (or 5 times, if shorter).
func (s *series) steady(ctx context.Context, n int, d time.Duration) (*Steady, error) {
	c, err := s.cluster(ctx, "steady")
	if err != nil {
		return nil, err
	}
	defer c.stop()
	m, err := New(s.meshConfig(c.targets(), n))
	if err != nil {
		return nil, err
	}
	defer m.Close()
	streamCtx, stop := context.WithCancel(ctx)
	defer stop()
	if err := m.Connect(ctx, 256); err != nil {
		return nil, err
	}
	if err := s.startShares(ctx, streamCtx, m); err != nil {
		return nil, err
	}
	s.prime(ctx, streamCtx, m, s.plan.PrimeRate, 3)
	every := min(time.Minute, d/5)
	out := &Steady{Envoys: n}
	start := time.Now()
	for el := time.Duration(0); el <= d; el = time.Since(start) {
		r, err := c.read(ctx)
		if err != nil {
			return nil, err
		}
		out.Minutes = append(out.Minutes, el.Minutes())
		out.RSS = append(out.RSS, r.usage.RSS)
		out.Heap = append(out.Heap, r.scrape.value("go_memstats_heap_inuse_bytes"))
		out.Gor = append(out.Gor, r.scrape.value("go_goroutines"))
		s.log.Info("steady", "minutes", el.Minutes(), "rss_mib", r.usage.RSS>>20, "goroutines", r.scrape.value("go_goroutines"))
		if el >= d {
			break
		}
		m.Run(ctx, streamCtx, s.plan.Rate, min(every, d-el))
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return out, nil
}

func value(m *testbed.Metrics, name string) float64 {
	v, _ := m.Value(name, map[string]string{})
	return v
}

func sumOf(m *testbed.Metrics, name string) float64 { return m.Sum(name, map[string]string{}) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errNoRuns: the plan has no N.
var errNoRuns = errors.New("meshsim: no envoy counts to run")

// pause is how long a starting daemon pauses admissions: its recovery
// window, with shares at least the shares' tail (the daemon's default
// shares settings; pkg/server's recoveryWindow).
func (p Plan) pause() time.Duration {
	if p.Shares == "" {
		return p.RecoveryWindow
	}
	return max(p.RecoveryWindow, shares.Settings{TTL: shares.DefaultTTL, MaxRequest: shares.DefaultMaxRequest}.Tail())
}

// healthCheck is the interval of the Envoys' health check of each daemon
// (0: none). As shipped: the configs for replicas on the Redis ledger
// health-check each replica (the template's bulkhead cluster with
// BulkheadReplicas, the chart's snippet with the Redis ledger at any
// replica count, deploy/compose), and those for one daemon on the
// in-memory ledger do not.
func (p Plan) healthCheck() time.Duration {
	switch {
	case p.Health > 0:
		return p.Health
	case p.Health == 0 && p.Ledger.shared():
		return DefaultHealthCheck
	}
	return 0
}

// defaultRecoveryWindow is the daemon's default leases.recovery_window.
const defaultRecoveryWindow = 1500 * time.Millisecond
