package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// Phase is one load run against one configuration.
type Phase struct {
	Config    string  `json:"config"`
	Loop      string  `json:"loop"`          // "closed", "open" or LoopHeartbeat
	Mix       string  `json:"mix,omitempty"` // LoopHeartbeat: MixShort or MixLong
	Round     int     `json:"round,omitempty"`
	Base      string  `json:"rate_base,omitempty"`     // open loop: BaseFloor or BaseCommon
	Fraction  float64 `json:"load_fraction,omitempty"` // open loop: of the base's maximum
	TargetRPS float64 `json:"target_rps,omitempty"`
	Conns     int     `json:"connections"`
	Seconds   float64 `json:"seconds"`
	Requests  int64   `json:"requests"`
	RPS       float64 `json:"rps"`
	Errors    int64   `json:"errors"`
	NonOK     int64   `json:"non_200"`
	Censored  int64   `json:"censored,omitempty"`
	// Latency: closed loop from send; open loop from the intended send
	// time (corrected for coordinated omission).
	Latency Summary  `json:"latency"`
	SendLag *Summary `json:"send_lag,omitempty"`
	// CPU by process: envoy, sidecar (no-op server or bulkhead daemon) and
	// harness (load generator and upstream).
	CPU map[string]CPUUse `json:"cpu"`
	// OtherLoad is the CPU that processes other than the harness's used
	// during the window, plus the time the hypervisor stole, in cores: the
	// interference on a shared machine.
	OtherLoad float64       `json:"other_load_cores"`
	Daemon    *DaemonMemory `json:"daemon,omitempty"`
	Lag       *ReleaseLag   `json:"release_lag,omitempty"`
	// AccessLog is the access-log entries the daemon handled in the window,
	// by result (bulkhead_access_log_entries_total): "renewed" counts the
	// periodic entries (heartbeats).
	AccessLog map[string]int64 `json:"access_log_entries,omitempty"`
	// Sidecar is what Envoy's own /stats counted between it and its
	// sidecar over the window; nil without a sidecar.
	Sidecar *SidecarTraffic `json:"envoy_sidecar,omitempty"`
	// Ledger is what the Redis ledger cost over the window; nil with the
	// in-memory ledger.
	Ledger *LedgerCost `json:"redis_ledger,omitempty"`
	// Shares is what a configuration with shares did; nil for the others.
	Shares   *SharesFigures `json:"shares,omitempty"`
	Problems []string       `json:"problems,omitempty"`
}

// SidecarTraffic is Envoy's traffic with its sidecar (the cluster of the
// ext_authz server and the access log) over a phase's window, from Envoy's
// /stats, per request completed in the window.
type SidecarTraffic struct {
	// Bytes Envoy wrote to and read from the sidecar's connections
	// (upstream_cx_tx_bytes_total, upstream_cx_rx_bytes_total): Checks and
	// access-log entries out; Check answers and HTTP/2 control frames
	// (window updates, pings, settings) in.
	TxBytes float64 `json:"tx_bytes_per_request"`
	RxBytes float64 `json:"rx_bytes_per_request"`
	// Requests: upstream_rq_total (Checks and access-log streams opened).
	Requests float64 `json:"upstream_requests_per_request"`
	// LogsWritten: access-log entries Envoy's gRPC access loggers wrote
	// (access_logs.grpc_access_log.logs_written), and dropped.
	LogsWritten float64 `json:"logs_written_per_request"`
	LogsDropped int64   `json:"logs_dropped"`
}

// sidecarCluster is the Envoy cluster of st's sidecar, "" without one.
func (s *stack) sidecarCluster() string {
	switch {
	case s.side == nil:
		return ""
	case s.spec.daemon():
		return envoy.BulkheadClusterName
	}
	return "sidecar" // proxy.yaml.tmpl
}

// sidecarTraffic is the traffic between two readings of Envoy's /stats,
// per request; nil if either is missing.
func sidecarTraffic(cluster string, before, after map[string]uint64, requests int64) *SidecarTraffic {
	if cluster == "" || before == nil || after == nil || requests <= 0 {
		return nil
	}
	delta := func(name string) float64 { return float64(after[name]) - float64(before[name]) }
	per := func(name string) float64 { return round3(delta(name) / float64(requests)) }
	c := "cluster." + cluster + "."
	return &SidecarTraffic{
		TxBytes: per(c + "upstream_cx_tx_bytes_total"), RxBytes: per(c + "upstream_cx_rx_bytes_total"),
		Requests:    per(c + "upstream_rq_total"),
		LogsWritten: per("access_logs.grpc_access_log.logs_written"),
		LogsDropped: int64(delta("access_logs.grpc_access_log.logs_dropped")),
	}
}

// CPUUse is one process's CPU over a phase's window.
type CPUUse struct {
	Cores   float64 `json:"cores"`              // CPU seconds per second
	MsPer1k float64 `json:"ms_per_1k_requests"` // CPU milliseconds per 1,000 requests
	// UsPerRequest is CPU microseconds per request from the threads'
	// nanosecond counters (threadsCPU), not /proc/PID/stat's 10 ms ticks:
	// the figure to use when the window holds little CPU.
	UsPerRequest float64 `json:"us_per_request,omitempty"`
	// RunsPerRequest is how many times the process's threads were put on
	// a CPU (schedstat's timeslices) per request: wake-ups of its event
	// loops, which a busy machine hardly changes, unlike CPU time.
	RunsPerRequest float64 `json:"runs_per_request,omitempty"`
	// UsAboveIdle is, of the Redis ledger's server (role "redis"),
	// UsPerRequest less the server's idle floor over the window
	// (ConfigInfo.RedisIdleFloor): what the daemons cost Redis, their
	// periodic calls included, without what a bare Redis costs itself.
	// nil for the other roles (and without a floor); negative when Redis
	// used less than its floor's rate.
	UsAboveIdle *float64 `json:"us_per_request_above_idle,omitempty"`
}

// usAboveIdle is cpu, a window's CPU of a process, less floor's rate over
// the window, in microseconds per request; nil without a floor or
// requests.
func usAboveIdle(floor *redisproc.Floor, cpu, window time.Duration, requests int64) *float64 {
	if floor == nil || requests <= 0 {
		return nil
	}
	v := round3(float64(floor.Above(cpu, window)) / float64(time.Microsecond) / float64(requests))
	return &v
}

// DaemonMemory is read from the daemon's own /metrics at a phase's end.
type DaemonMemory struct {
	RSSBytes       float64 `json:"rss_bytes"`        // process_resident_memory_bytes
	HeapInuseBytes float64 `json:"heap_inuse_bytes"` // go_memstats_heap_inuse_bytes
	HeapAllocBytes float64 `json:"heap_alloc_bytes"` // go_memstats_heap_alloc_bytes
	Goroutines     float64 `json:"goroutines"`       // go_goroutines
}

// reading is the state of a stack at one end of a phase's window.
type reading struct {
	cpu      map[string]time.Duration
	threads  map[string]time.Duration // threadsCPU, by role
	runs     map[string]int64         // threadsCPU's timeslices, by role
	others   time.Duration            // machine busy + stolen - every process of the run
	at       time.Time
	metrics  *testbed.Metrics   // the daemon's (replica 0's), or nil
	replicas []*testbed.Metrics // every daemon replica's, replica 0 first
	ledger   *ledgerCounts      // Redis ledger: its calls, every replica
	redis    *redisproc.Info    // Redis ledger: its server's INFO
	stats    map[string]uint64  // Envoy's counters, when it has a sidecar
	upServed int64
	upBusy   time.Duration
	err      error
}

// pids are the processes whose CPU a phase accounts, by role: the
// sidecar's are every daemon replica; "redis" is the Redis ledger's server.
func (e *env) pids(st *stack) map[string][]int {
	p := map[string][]int{"envoy": {st.proxy.PID()}, "harness": {os.Getpid()}}
	if st.side != nil {
		p["sidecar"] = []int{st.side.PID()}
		for _, c := range st.more {
			p["sidecar"] = append(p["sidecar"], c.PID())
		}
	}
	if st.redis != nil {
		p["redis"] = []int{st.redis.PID()}
	}
	return p
}

// allPIDs are every process of the run: this one, the sidecars, every Envoy.
func (e *env) allPIDs() []int {
	pids := []int{os.Getpid()}
	for _, c := range e.sidecars {
		pids = append(pids, c.PID())
	}
	for _, cs := range e.replicas {
		for _, c := range cs {
			pids = append(pids, c.PID())
		}
	}
	for _, r := range e.redis {
		pids = append(pids, r.PID())
	}
	for _, st := range slices.Concat(e.stacks, e.heartbeat) {
		pids = append(pids, st.proxy.PID())
	}
	return pids
}

// read takes a reading of st. The daemon's /metrics (and on the Redis
// ledger every replica's, and the server's INFO) is scraped outside the
// CPU window (before the CPU at the start, after it at the end), so that
// the scrape's own cost is not charged to the requests.
func (e *env) read(ctx context.Context, st *stack, end bool) reading {
	r := reading{cpu: map[string]time.Duration{}, threads: map[string]time.Duration{}, runs: map[string]int64{}}
	scrape := func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		for _, url := range st.metricsURLs() {
			if r.err != nil {
				break
			}
			var m *testbed.Metrics
			if m, r.err = testbed.Scrape(sctx, url); r.err == nil {
				r.replicas = append(r.replicas, m)
			}
		}
		if len(r.replicas) > 0 {
			r.metrics = r.replicas[0]
		}
		if st.redis != nil && r.err == nil {
			r.ledger = sumLedgerCalls(r.replicas)
		}
		if st.redis != nil && r.err == nil {
			var info redisproc.Info
			if info, r.err = st.redis.Info(sctx); r.err == nil {
				r.redis = &info
			}
		}
		if st.sidecarCluster() != "" && r.err == nil {
			if r.stats, r.err = st.proxy.Stats(sctx); r.err != nil {
				r.err = fmt.Errorf("envoy /stats: %w", r.err)
			}
		}
	}
	if !end {
		scrape()
	}
	for role, pids := range e.pids(st) {
		for _, pid := range pids {
			d, err := cpuTime(pid)
			if err != nil && r.err == nil {
				r.err = fmt.Errorf("%s: %w", role, err)
			}
			r.cpu[role] += d
			d, runs, err := threadsCPU(pid)
			if err != nil && r.err == nil {
				r.err = fmt.Errorf("%s: %w", role, err)
			}
			r.threads[role] += d
			r.runs[role] += runs
		}
	}
	r.upServed, r.upBusy = e.upstream.Stats()
	r.at = time.Now()
	busy, steal, err := machineCPU()
	if err != nil && r.err == nil {
		r.err = err
	}
	r.others = busy + steal
	for _, pid := range e.allPIDs() {
		if d, err := cpuTime(pid); err == nil {
			r.others -= d
		}
	}
	if end {
		scrape()
	}
	return r
}

// measure runs load against st between two readings and turns what it saw
// into a Phase.
func (e *env) measure(ctx context.Context, st *stack, p Phase, load func(marker) loadStats) Phase {
	var r [2]reading
	s := load(func(end bool) {
		i := 0
		if end {
			i = 1
		}
		r[i] = e.read(ctx, st, end)
	})
	p.Config = st.spec.Name
	p.Seconds = s.Window.Seconds()
	p.Requests = s.Requests
	p.RPS = math.Round(float64(s.Requests) / s.Window.Seconds())
	p.Errors, p.NonOK, p.Censored = s.Errors, s.NonOK, s.Censored
	p.Latency = summarize(s.Latencies)
	if s.SendLag != nil {
		lag := summarize(s.SendLag)
		p.SendLag = &lag
	}
	for _, x := range r {
		if x.err != nil {
			p.Problems = append(p.Problems, x.err.Error())
		}
	}
	if dt := r[1].at.Sub(r[0].at).Seconds(); dt > 0 {
		p.OtherLoad = round3(max((r[1].others-r[0].others).Seconds()/dt, 0))
	}
	p.CPU = map[string]CPUUse{}
	for role := range r[1].cpu {
		d := r[1].cpu[role] - r[0].cpu[role]
		u := CPUUse{Cores: round3(d.Seconds() / s.Window.Seconds())}
		if s.Requests > 0 {
			u.MsPer1k = round3(float64(d.Milliseconds()) / (float64(s.Requests) / 1000))
			td := r[1].threads[role] - r[0].threads[role]
			u.UsPerRequest = round3(float64(td) / float64(time.Microsecond) / float64(s.Requests))
			u.RunsPerRequest = round3(float64(r[1].runs[role]-r[0].runs[role]) / float64(s.Requests))
			if role == "redis" {
				u.UsAboveIdle = usAboveIdle(st.floor, td, r[1].at.Sub(r[0].at), s.Requests)
			}
		}
		p.CPU[role] = u
	}
	p.Sidecar = sidecarTraffic(st.sidecarCluster(), r[0].stats, r[1].stats, s.Requests)
	if st.redis != nil {
		p.Ledger = ledgerCost(1+len(st.more), r[0], r[1], s.Requests)
	}
	if m := r[1].metrics; m != nil {
		p.Daemon = &DaemonMemory{
			RSSBytes:       sum(m, "process_resident_memory_bytes"),
			HeapInuseBytes: sum(m, "go_memstats_heap_inuse_bytes"),
			HeapAllocBytes: sum(m, "go_memstats_heap_alloc_bytes"),
			Goroutines:     sum(m, "go_goroutines"),
		}
		if r[0].metrics != nil && len(r[0].replicas) == len(r[1].replicas) {
			served := r[1].upServed - r[0].upServed
			var upMean time.Duration
			if served > 0 {
				upMean = (r[1].upBusy - r[0].upBusy) / time.Duration(served)
			}
			// Of several replicas: the entries of all, the lag of the one
			// that released most (Envoy's streams may all go to one).
			var errs []error
			for i := range r[1].replicas {
				for res, n := range entriesDelta(r[0].replicas[i], r[1].replicas[i]) {
					if p.AccessLog == nil {
						p.AccessLog = map[string]int64{}
					}
					p.AccessLog[res] += n
				}
				lag, err := releaseLag(r[0].replicas[i], r[1].replicas[i], upMean)
				if err != nil {
					errs = append(errs, err)
				} else if p.Lag == nil || lag.Releases > p.Lag.Releases {
					p.Lag = &lag
				}
			}
			// With shares the requests on the share route hold no permit:
			// a window may release none.
			if p.Lag == nil && len(errs) > 0 && !(st.spec.shares && errors.Is(errs[0], errNoHolds)) {
				p.Problems = append(p.Problems, errs[0].Error())
			}
		}
	}
	if st.spec.shares || st.spec.near {
		p.Shares = sharesFigures(sharesLimit(st.spec.sidecar, e.conns), &p, r[0], r[1])
	}
	if s.Errors > 0 || s.NonOK > 0 {
		p.Problems = append(p.Problems, fmt.Sprintf("%d errors, %d non-200 responses", s.Errors, s.NonOK))
	}
	return p
}

// entriesDelta is bulkhead_access_log_entries_total between two scrapes,
// by result; results that did not move are left out.
func entriesDelta(before, after *testbed.Metrics) map[string]int64 {
	const name = "bulkhead_access_log_entries_total"
	out := map[string]int64{}
	for _, s := range after.Samples(name) {
		res := s.Labels["result"]
		prev, _ := before.Value(name, map[string]string{"result": res})
		if d := int64(math.Round(s.Value - prev)); d != 0 {
			out[res] = d
		}
	}
	return out
}

func sum(m *testbed.Metrics, name string) float64 { return m.Sum(name, nil) }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
