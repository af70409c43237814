package meshsim

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
)

// runMain is the run and calibrate commands.
func runMain(ctx context.Context, log *slog.Logger, cmd string, fs *flag.FlagSet, args []string, envoyBin, out *string, stdout io.Writer) int {
	ns := fs.String("n", "10,100,1000,5000", "numbers of simulated Envoys, comma-separated, smallest first")
	rate := fs.Float64("rate", 1000, "Checks per second, every Envoy together")
	workers := fs.Int("workers", 2, "workers per Envoy (a connection and two access-log streams each)")
	bulkheads := fs.Int("bulkheads", 50, "bulkheads (every fourth limited to 4 concurrent requests, with -limited)")
	limited := fs.Bool("limited", true, "every fourth bulkhead limited to 4 concurrent requests (false: none has a limit the load reaches)")
	ledger := fs.String("ledger", string(LedgerMemory), "the daemons' ledger: memory; redis (a redis-server of the run's own, fail_closed); "+
		"leases (redis with capacity_leases: true)")
	replicas := fs.Int("replicas", 1, "daemon replicas behind each Envoy's bulkhead cluster (more than 1: -ledger redis or leases)")
	spread := fs.String("spread", string(SpreadRequest), "how an Envoy spreads over the replicas: request (the shipped cluster's round robin: "+
		"every worker connected to every replica, its Checks in turn, its two streams on different replicas) or worker (worker i on replica i mod K)")
	tenants := fs.Int("tenants", 200, "tenant header values (0: no tenants)")
	warmup := fs.Duration("warmup", 10*time.Second, "load before each window")
	window := fs.Duration("window", 30*time.Second, "measurement window per N")
	prime := fs.Float64("prime-rate", 1000, "requests per second that open every worker's streams before the warm-up")
	storm := fs.Bool("storm", true, "the reconnect storm at the largest N")
	burst := fs.Bool("storm-burst", true, "in the storm, every worker sends a request within the second after the restart (a busy mesh)")
	singleLog := fs.Bool("single-log", false, "one access-log stream per worker: periodic entries on the release log, unbuffered "+
		"(envoy.Params.SingleAccessLog), instead of a second, batched heartbeat log")
	ping := fs.Duration("ping", 0, "the Envoys' HTTP/2 keepalive interval (0: the shipped configs' 1s; negative: none)")
	health := fs.Duration("health", 0, "the Envoys' gRPC health-check interval, on a connection of their own to each daemon "+
		"(0: as the shipped configs, 1s with -ledger redis or leases, none on one in-memory daemon; negative: none; positive: always)")
	steady := fs.Duration("steady", 0, "the steady run's length (0: none; the issue's is 10m)")
	steadyN := fs.Int("steady-n", 1000, "Envoys in the steady run")
	calib := fs.Bool("calibrate", cmd == "calibrate", "the real-Envoy calibration (needs Envoy)")
	calibRate := fs.Float64("calibrate-rate", 300, "the calibration's requests per second")
	calibWindow := fs.Duration("calibrate-window", 20*time.Second, "the calibration's window per round")
	calibRounds := fs.Int("calibrate-rounds", 3, "the calibration's rounds (a real Envoy's and the simulator's each)")
	sharesMode := fs.String("shares", "", "every bulkhead's shares mode, shares or auto (none: strict); the Envoys keep RTDS and LRS streams "+
		"and pass a share's requests through its circuit breaker (needs -tenants 0 -storm=false)")
	daemonBin := fs.String("daemon", "", "the daemon binary to run (default: cmd/bulkhead built from this module), to measure another build")
	idleWindow := fs.Duration("idle-window", 0, "a window measured before the warm-up with every Envoy connected and no requests (0: none)")
	limit := fs.Int("limit", 0, "every bulkhead's limit (a queue of twice it, max_wait 200ms), instead of -limited's")
	durations := fs.String("durations", "", "the request durations' mix, duration:weight comma-separated (default 20ms:70,200ms:25,2.5s:5)")
	poisson := fs.Bool("poisson", false, "requests at exponential intervals (Poisson arrivals) instead of evenly spaced")
	load := fs.Float64("load", 0, "the load as a part of -limit (0.25: a quarter): sets -rate to it by Little's law over the durations' mean")
	skew := fs.Float64("skew", 0, "the part of the requests sent to one busy Envoy, the others sharing the rest (0: every Envoy alike)")
	shift := fs.Duration("shift", 0, "with -skew, the busy Envoy moves to the next one every this long (0: never)")
	daemonCPUs := fs.String("daemon-cpus", "", "the CPUs the daemons run on, a taskset -c list (0, 0-1, 0,2): "+
		"each daemon under taskset, every thread of it there (not the calibration's daemon; \"\": any)")
	simCPUs := fs.String("sim-cpus", "", "the CPUs the simulator runs on, a taskset -c list: it runs itself again under taskset, "+
		"with its other children (redis-server, Envoy); the daemons on every CPU without -daemon-cpus (\"\": any)")
	cpuProfile := fs.String("cpuprofile", "", "write the simulator's own CPU profile to this file (what limits it at large N)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	mix, err := parseDurations(*durations)
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshsim: -durations:", err)
		return 2
	}
	if *load > 0 {
		if *limit <= 0 {
			fmt.Fprintln(os.Stderr, "meshsim: -load needs -limit")
			return 2
		}
		*rate = *load * float64(*limit**bulkheads) / meanDuration(mix).Seconds()
	}
	plan := Plan{Workers: *workers, Rate: *rate, Bulkheads: *bulkheads, Tenants: *tenants, Warmup: *warmup,
		Window: *window, PrimeRate: *prime, Storm: *storm, StormBurst: *burst, Steady: *steady, SteadyN: *steadyN, Ping: *ping, Health: *health, SingleLog: *singleLog,
		RecoveryWindow: defaultRecoveryWindow, Limited: *limited, Ledger: Ledger(*ledger), Replicas: *replicas, Spread: Spread(*spread),
		Shares: *sharesMode, IdleWindow: *idleWindow, DaemonBin: *daemonBin,
		Limit: *limit, Durations: mix, Poisson: *poisson, Skew: *skew, Shift: *shift, Load: *load,
		DaemonCPUs: *daemonCPUs, SimCPUs: *simCPUs}
	if cmd == "calibrate" {
		plan.Storm = false
	} else {
		for _, f := range strings.Split(*ns, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				fmt.Fprintf(os.Stderr, "meshsim: -n: bad count %q\n", f)
				return 2
			}
			plan.Ns = append(plan.Ns, n)
		}
	}
	if err := plan.check(); err != nil {
		fmt.Fprintln(os.Stderr, "meshsim:", err)
		return 2
	}
	if err := pinSelf(plan.SimCPUs); err != nil {
		fmt.Fprintln(os.Stderr, "meshsim:", err)
		return 1
	}
	// After pinSelf: it may run the simulator again under taskset.
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "meshsim: -cpuprofile:", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "meshsim: -cpuprofile:", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if plan.SimCPUs != "" {
		a, err := threadCPUs(os.Getpid())
		log.Info("the simulator is pinned", "cpus", plan.SimCPUs, "threads", a, "err", err)
	}
	if plan.Ledger == LedgerLeases && plan.Tenants > 0 {
		log.Warn("a bulkhead with tenant compartments holds no capacity lease: -tenants 0 compares the leases")
	}
	if *out == "" {
		*out = filepath.Join("tmp", "meshsim")
	}
	res, err := runPlan(ctx, log, plan, *out, *calib, *envoyBin, *calibRate, *calibWindow, *calibRounds)
	if res != nil {
		if werr := res.write(*out, stdout); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshsim:", err)
		return 1
	}
	return 0
}

func runPlan(ctx context.Context, log *slog.Logger, plan Plan, out string, calib bool, envoyBin string,
	calibRate float64, calibWindow time.Duration, calibRounds int) (*Results, error) {
	if len(plan.Ns) == 0 && !calib && plan.Steady == 0 {
		return nil, errNoRuns
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "meshsim-")
	if err != nil {
		return nil, err
	}
	if os.Getenv(EnvDaemonGODEBUG) == "" {
		defer os.RemoveAll(dir)
	} else {
		log.Info("keeping the daemons' logs", "paths", filepath.Join(dir, "replica-*", "bulkhead.log"))
	}
	bin := plan.DaemonBin
	if bin == "" {
		log.Info("building the daemon")
		if bin, err = BuildDaemon(ctx, dir); err != nil {
			return nil, err
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	res := &Results{Plan: plan, Started: time.Now(), Load: strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " ")}
	s := &series{log: log, bin: bin, dir: dir, plan: plan}
	for i, n := range plan.Ns {
		r, st, err := s.runN(ctx, n, plan.Storm && i == len(plan.Ns)-1)
		if err != nil {
			return res, fmt.Errorf("run with %d Envoys: %w", n, err)
		}
		res.Runs = append(res.Runs, r)
		res.Storm = st
	}
	if plan.Steady > 0 {
		st, err := s.steady(ctx, plan.SteadyN, plan.Steady)
		if err != nil {
			return res, fmt.Errorf("steady run: %w", err)
		}
		res.Steady = st
	}
	if calib {
		if envoyBin == "" {
			if envoyBin, err = envoyproc.FindBinary(); err != nil {
				return res, err
			}
		}
		c, err := calibrate(ctx, log, bin, dir, envoyBin, calibRate, calibWindow, calibRounds)
		if err != nil {
			return res, fmt.Errorf("calibration: %w", err)
		}
		res.Calib = c
	}
	return res, nil
}

// check refuses a plan that cannot run: an unknown ledger or spread,
// replicas of the in-memory ledger (each would keep its own count), or
// the storm (one daemon restarted) with more than one replica.
func (p Plan) check() error {
	switch {
	case !p.Ledger.valid():
		return fmt.Errorf("%w: -ledger %q: want memory, redis or leases", ErrConfig, p.Ledger)
	case !p.Spread.valid():
		return fmt.Errorf("%w: -spread %q: want request or worker", ErrConfig, p.Spread)
	case p.Replicas < 1:
		return fmt.Errorf("%w: -replicas %d: want at least 1", ErrConfig, p.Replicas)
	case p.Replicas > 1 && !p.Ledger.shared():
		return fmt.Errorf("%w: -replicas %d on the in-memory ledger: each replica would keep its own count (-ledger redis or leases)", ErrConfig, p.Replicas)
	case p.Replicas > 1 && p.Storm:
		return fmt.Errorf("%w: the storm restarts one daemon: -storm=false with -replicas %d", ErrConfig, p.Replicas)
	case !validCPUs(p.DaemonCPUs):
		return fmt.Errorf("%w: -daemon-cpus %q: want a CPU list as taskset -c takes it (0, 0-1, 0,2)", ErrConfig, p.DaemonCPUs)
	case !validCPUs(p.SimCPUs):
		return fmt.Errorf("%w: -sim-cpus %q: want a CPU list as taskset -c takes it (0, 0-1, 0,2)", ErrConfig, p.SimCPUs)
	case p.Shares == "":
	case p.Shares != shares.Shares.String() && p.Shares != shares.Auto.String():
		return fmt.Errorf("%w: -shares %q: want shares or auto (or none)", ErrConfig, p.Shares)
	case p.Ledger == LedgerRedis:
		return fmt.Errorf("%w: -shares on Redis are held from capacity leases (-ledger leases, or memory)", ErrConfig)
	case p.Tenants > 0:
		return fmt.Errorf("%w: -shares: a bulkhead with tenants stays strict (-tenants 0)", ErrConfig)
	case p.Storm:
		return fmt.Errorf("%w: -shares: the simulated Envoys do not model a daemon restart (-storm=false)", ErrConfig)
	}
	return nil
}

// write puts results.json, results.md and meshsim.svg into dir, and the
// markdown on stdout.
func (r *Results) write(dir string, stdout io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		return err
	}
	var md strings.Builder
	r.Markdown(&md)
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	var svg strings.Builder
	r.SVG(&svg)
	if err := os.WriteFile(filepath.Join(dir, "meshsim.svg"), []byte(svg.String()), 0o644); err != nil {
		return err
	}
	_, err = io.WriteString(stdout, md.String())
	return err
}

// parseDurations parses -durations: duration:weight, comma-separated ("":
// none, the default mix).
func parseDurations(s string) ([]DurationShare, error) {
	var out []DurationShare
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		ds, ws, ok := strings.Cut(f, ":")
		d, err := time.ParseDuration(ds)
		if err != nil || d <= 0 || !ok {
			return nil, fmt.Errorf("%q: want duration:weight", f)
		}
		w, err := strconv.ParseFloat(ws, 64)
		if err != nil || w <= 0 {
			return nil, fmt.Errorf("%q: want a positive weight", f)
		}
		out = append(out, DurationShare{Duration: d, Weight: w})
	}
	return out, nil
}

// meanDuration is the mean of mix (none: Config's default mix).
func meanDuration(mix []DurationShare) time.Duration {
	if len(mix) == 0 {
		mix = Config{}.withDefaults().Durations
	}
	var sum, w float64
	for _, d := range mix {
		sum += float64(d.Duration) * d.Weight
		w += d.Weight
	}
	return time.Duration(sum / w)
}
