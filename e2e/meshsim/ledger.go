package meshsim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/redisproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// Ledger is where the daemons keep their permits.
type Ledger string

// The ledgers a run can use.
const (
	// LedgerMemory is the in-memory ledger: one daemon.
	LedgerMemory Ledger = "memory"
	// LedgerRedis is the shared ledger on a redis-server of the run's own
	// (ledger.backend: redis, on_unavailable: fail_closed) without capacity
	// leases (capacity_leases: false; they are the default): every
	// admission is a call to Redis.
	LedgerRedis Ledger = "redis"
	// LedgerLeases is LedgerRedis with capacity leases
	// (ledger.redis.capacity_leases: true): a replica admits from its
	// lease without a call to Redis while the lease has room.
	LedgerLeases Ledger = "leases"
)

// valid reports whether l is a known ledger.
func (l Ledger) valid() bool { return l == LedgerMemory || l == LedgerRedis || l == LedgerLeases }

// shared reports whether l keeps its permits in Redis.
func (l Ledger) shared() bool { return l == LedgerRedis || l == LedgerLeases }

// yaml is the daemon configuration's ledger section for l on the
// redis-server at redisAddr ("" with LedgerMemory: the default ledger).
func (l Ledger) yaml(redisAddr string) string {
	switch l {
	case LedgerRedis:
		return fmt.Sprintf("ledger: {backend: redis, on_unavailable: fail_closed, redis: {address: %q, capacity_leases: false}}\n", redisAddr)
	case LedgerLeases:
		return fmt.Sprintf("ledger: {backend: redis, on_unavailable: fail_closed, redis: {address: %q, capacity_leases: true}}\n", redisAddr)
	}
	return ""
}

// cluster is the daemon replicas of one run and, with a shared ledger,
// their redis-server. Run by one goroutine.
type cluster struct {
	daemons []*Daemon
	redis   *redisproc.Server // nil with LedgerMemory
	// floor is the redis-server's own CPU, bare: measured after it started,
	// before the daemons did (zero with LedgerMemory).
	floor redisproc.Floor
}

// startCluster starts replicas daemons of bin, each in a folder of its own
// under dir (replica-0...), with the configuration cfg renders for its gRPC
// address and the ledger section; with a shared ledger, a redis-server
// (named name) first, and its idle floor (redisproc.FloorWindow) before
// any daemon starts. opts apply to every daemon.
func startCluster(ctx context.Context, bin, dir, name string, replicas int, ledger Ledger,
	cfg func(grpcAddr, ledgerYAML string) string, opts ...DaemonOption) (_ *cluster, err error) {
	c := &cluster{}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	redisAddr := ""
	if ledger.shared() {
		if c.redis, err = redisproc.Start(ctx, dir, name); err != nil {
			return nil, err
		}
		if c.floor, err = c.redis.IdleFloor(ctx, redisproc.FloorWindow); err != nil {
			return nil, err
		}
		redisAddr = c.redis.Addr()
	}
	for i := range replicas {
		rdir := filepath.Join(dir, fmt.Sprintf("replica-%d", i))
		if err := os.MkdirAll(rdir, 0o755); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrDaemon, err)
		}
		addr, err := FreePort()
		if err != nil {
			return nil, err
		}
		d, err := StartDaemon(ctx, bin, rdir, cfg(addr, ledger.yaml(redisAddr)), opts...)
		if err != nil {
			return nil, err
		}
		c.daemons = append(c.daemons, d)
	}
	return c, nil
}

// targets are the replicas' gRPC addresses.
func (c *cluster) targets() []string {
	var out []string
	for _, d := range c.daemons {
		out = append(out, d.GRPC)
	}
	return out
}

// stop stops the daemons (they say goodbye to their ledger), then Redis.
func (c *cluster) stop() {
	for _, d := range c.daemons {
		d.Stop()
	}
	if c.redis != nil {
		_ = c.redis.Stop()
	}
}

// usage is every replica's CPU and resident memory, summed.
func (c *cluster) usage() (Usage, error) {
	var sum Usage
	for _, d := range c.daemons {
		u, err := d.Usage()
		if err != nil {
			return sum, err
		}
		sum.CPU += u.CPU
		sum.RSS += u.RSS
	}
	return sum, nil
}

// scrape reads every replica's /metrics.
func (c *cluster) scrape(ctx context.Context) (scrape, error) {
	var out scrape
	for _, d := range c.daemons {
		m, err := d.Metrics(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// read takes a reading: usage, /metrics and, with a shared ledger,
// Redis's INFO.
func (c *cluster) read(ctx context.Context) (reading, error) {
	r := reading{at: time.Now()}
	var err error
	if r.usage, err = c.usage(); err != nil {
		return r, err
	}
	if r.scrape, err = c.scrape(ctx); err != nil {
		return r, err
	}
	if c.redis != nil {
		info, err := c.redis.Info(ctx)
		if err != nil {
			return r, err
		}
		r.redis = &info
	}
	return r, nil
}

// dumpGoroutines ends every replica with SIGQUIT and counts their
// goroutines by creator, summed (Daemon.DumpGoroutines).
func (c *cluster) dumpGoroutines() ([]Count, error) {
	sum := map[string]int{}
	var errs []error
	for _, d := range c.daemons {
		counts, err := d.DumpGoroutines()
		errs = append(errs, err)
		for _, n := range counts {
			sum[n.What] += n.N
		}
	}
	out := make([]Count, 0, len(sum))
	for k, v := range sum {
		out = append(out, Count{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].N > out[j].N || out[i].N == out[j].N && out[i].What < out[j].What })
	return out, errors.Join(errs...)
}

// reading is the cluster at one moment.
type reading struct {
	at     time.Time
	usage  Usage
	scrape scrape
	redis  *redisproc.Info // nil with LedgerMemory
}

// scrape is every replica's /metrics at one moment.
type scrape []*testbed.Metrics

// value is the series name without labels, summed over the replicas.
func (s scrape) value(name string) float64 {
	var v float64
	for _, m := range s {
		v += value(m, name)
	}
	return v
}

// sum is every series of name, summed over the replicas.
func (s scrape) sum(name string) float64 {
	var v float64
	for _, m := range s {
		v += sumOf(m, name)
	}
	return v
}

// by is the series of name by the value of label, summed over the
// replicas.
func (s scrape) by(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range s {
		for _, smp := range m.Samples(name) {
			out[smp.Labels[label]] += smp.Value
		}
	}
	return out
}

// histogram is the histogram name, summed over the replicas.
func (s scrape) histogram(name string) histogram {
	h := histogram{}
	for _, m := range s {
		for le, n := range histogramOf(m, name) {
			h[le] += n
		}
	}
	return h
}

// LedgerCost is what the shared ledger cost over a window, every replica
// together.
type LedgerCost struct {
	// Calls is the daemons' calls to Redis (bulkhead_ledger_calls_total,
	// every result) per admitted request, by operation: acquire, release,
	// renew... for requests, state, replicas and lease each tick.
	Calls map[string]float64 `json:"calls_per_admitted"`
	// CallsPerAdmitted is Calls summed.
	CallsPerAdmitted float64 `json:"all_calls_per_admitted"`
	// Failed is the calls whose result was not ok.
	Failed float64 `json:"failed_calls"`
	// ScriptsPerAdmitted is the scripts Redis ran (EVALSHA and EVAL, from
	// INFO commandstats) per admitted request; a state call is a pipeline
	// of one script per bulkhead.
	ScriptsPerAdmitted float64 `json:"redis_scripts_per_admitted"`
	// ScriptUsPerAdmitted is Redis's time inside those scripts
	// (commandstats usec, the commands they ran included) per admitted
	// request, in microseconds. It is wall time: on a busy machine, where
	// Redis is preempted inside a script, it can exceed
	// RedisCPUPerAdmitted; on an idle one, RedisCPUPerAdmitted less this
	// is Redis's time outside the scripts (reading and answering calls,
	// its cron).
	ScriptUsPerAdmitted float64 `json:"redis_script_us_per_admitted"`
	// RedisCPUPerAdmitted is Redis's CPU (INFO used_cpu_sys +
	// used_cpu_user) per admitted request, in microseconds.
	RedisCPUPerAdmitted float64 `json:"redis_cpu_us_per_admitted"`
	// RedisCPUAboveBare is RedisCPUPerAdmitted less the bare Redis's own
	// CPU over the window (RedisBareCPU's rate): what the daemons cost
	// Redis, their periodic calls (ticks, leases) included, without the
	// timers any Redis runs. Negative when Redis used less than its bare
	// rate.
	RedisCPUAboveBare float64 `json:"redis_cpu_us_per_admitted_above_bare"`
	// RedisCPUPer1k is Redis's CPU per 1,000 requests answered, in
	// milliseconds.
	RedisCPUPer1k float64 `json:"redis_cpu_ms_per_1k_requests"`
	// FromLeases is the share of the admissions a replica made from its
	// capacity lease (bulkhead_ledger_lease_admitted_total).
	FromLeases float64 `json:"admitted_from_leases"`
	// RedisIdleCPU is Redis's CPU in milliseconds a second while the
	// daemons ran without load (their ticks, Redis's own): the floor under
	// RedisCPUPer1k, which a low rate divides by few requests.
	RedisIdleCPU float64 `json:"redis_idle_cpu_ms_per_s"`
	// RedisBareCPU is Redis's CPU in milliseconds a second before the
	// daemons started (redisproc.IdleFloor): its own timers alone, the
	// part of RedisIdleCPU that is not Bulkhead's.
	RedisBareCPU float64 `json:"redis_bare_cpu_ms_per_s"`
}

// ledgerCost is the shared ledger's cost between two readings over
// admitted requests of checks answered, Redis's bare floor taken off for
// RedisCPUAboveBare; nil without Redis's figures or admissions.
func ledgerCost(before, after reading, admitted, checks int64, floor redisproc.Floor) *LedgerCost {
	if before.redis == nil || after.redis == nil || admitted <= 0 {
		return nil
	}
	n := float64(admitted)
	c := &LedgerCost{Calls: map[string]float64{}}
	b0 := before.scrape.by("bulkhead_ledger_calls_total", "op")
	for op, v := range after.scrape.by("bulkhead_ledger_calls_total", "op") {
		if d := v - b0[op]; d > 0 {
			c.Calls[op] = d / n
			c.CallsPerAdmitted += d / n
		}
	}
	c.Failed = failedCalls(after.scrape) - failedCalls(before.scrape)
	c.ScriptsPerAdmitted = float64(after.redis.Scripts()-before.redis.Scripts()) / n
	c.ScriptUsPerAdmitted = float64(after.redis.ScriptUsec()-before.redis.ScriptUsec()) / n
	d := after.redis.CPU - before.redis.CPU
	cpu := float64(d.Nanoseconds())
	c.RedisCPUPerAdmitted = cpu / 1e3 / n
	c.RedisBareCPU = floor.MsPerSecond()
	c.RedisCPUAboveBare = float64(floor.Above(d, after.at.Sub(before.at)).Nanoseconds()) / 1e3 / n
	if checks > 0 {
		c.RedisCPUPer1k = cpu / 1e6 / (float64(checks) / 1000)
	}
	leased := "bulkhead_ledger_lease_admitted_total"
	c.FromLeases = (after.scrape.sum(leased) - before.scrape.sum(leased)) / n
	return c
}

// redisCPURate is Redis's CPU between two readings, in milliseconds a
// second (0 without Redis's figures).
func redisCPURate(before, after reading) float64 {
	secs := after.at.Sub(before.at).Seconds()
	if before.redis == nil || after.redis == nil || secs <= 0 {
		return 0
	}
	return float64((after.redis.CPU - before.redis.CPU).Nanoseconds()) / 1e6 / secs
}

// failedCalls is the ledger calls whose result was not ok.
func failedCalls(s scrape) float64 {
	var f float64
	for res, v := range s.by("bulkhead_ledger_calls_total", "result") {
		if res != "ok" {
			f += v
		}
	}
	return f
}
