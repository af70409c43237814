package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// options are the command line.
type options struct {
	out        string
	quick      bool
	micro      bool
	e2e        bool
	diagnostic bool
	loops      bool
	configs    string
	envoyBin   string
	baseline   string
	reportFrom string
	plan       Plan
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("benchharness", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "out", "docs/perf", "results folder (results.md, results.json, latency.png, hotpath-profile.txt)")
	fs.BoolVar(&o.quick, "quick", false, "a short run (about four minutes): indicative figures only")
	fs.BoolVar(&o.micro, "micro", true, "run the Go micro-benchmarks and profile the daemon's hot path")
	fs.BoolVar(&o.e2e, "e2e", true, "run the load harness through real Envoys")
	fs.BoolVar(&o.diagnostic, "diagnostic", true, "also measure no-op ext_authz + access log (tells Envoy's access-log cost apart)")
	fs.BoolVar(&o.loops, "loops", true, "run the closed and open loops (false: only the heartbeat phase, if on)")
	heartbeat := fs.Bool("heartbeat", true, "measure the heartbeat leases' cost (the bulkhead with heartbeats on, on with a single access logger, and off)")
	hbRate := fs.Float64("heartbeat-rate", 0, "the heartbeat phase's short-request rate, req/s (default: half the bulkhead's closed-loop best, or 1000)")
	hbRounds := fs.Int("heartbeat-rounds", 0, "heartbeat phase rounds per setting (default: the plan's)")
	fs.StringVar(&o.configs, "configs", "", "comma-separated configurations to measure (default: all; the floor is always measured)")
	fs.StringVar(&o.envoyBin, "envoy", "", "Envoy binary (default: $ENVOY_BIN, .venv/bin/envoy, then PATH)")
	fs.StringVar(&o.baseline, "baseline", "", "a bulkhead daemon built from another revision: also measure it (bulkhead-baseline, "+
		"bulkhead-redis-baseline) in the same run, interleaved with the one built from this tree")
	fs.StringVar(&o.reportFrom, "report-from", "", "measure nothing: read this results.json, evaluate the goals again and write the results into -out")
	delay := fs.Duration("upstream-delay", 0, "the upstream's fixed service time")
	conns := fs.Int("closed-connections", 0, "closed-loop connections (default: the plan's)")
	rounds := fs.Int("rounds", 0, "closed-loop rounds (default: the plan's)")
	openRounds := fs.Int("open-rounds", 0, "open-loop rounds at the common base (default: the plan's)")
	closedWin := fs.Duration("closed-window", 0, "closed-loop measured window (default: the plan's)")
	openWin := fs.Duration("open-window", 0, "open-loop measured window per rate (default: the plan's; negative: no open loop)")
	openWarm := fs.Duration("open-warmup", 0, "open-loop warm-up per rate (default: the plan's; longer than the capacity leases' "+
		"tick, 1 s, lets a lease parked while the other configurations ran be granted again before the window)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected arguments %q", fs.Args())
		fmt.Fprintln(stderr, err)
		return o, err
	}
	if err := knownConfigs(o.configs); err != nil {
		fmt.Fprintln(stderr, err)
		return o, err
	}
	o.plan = fullPlan()
	if o.quick {
		o.plan = quickPlan()
	}
	o.plan.UpstreamDelay = *delay
	if *conns > 0 {
		o.plan.ClosedConns = *conns
	}
	if *rounds > 0 {
		o.plan.Rounds = *rounds
	}
	if *openRounds > 0 {
		o.plan.OpenRounds = *openRounds
	}
	if *closedWin > 0 {
		o.plan.ClosedWindow = *closedWin
	}
	if *openWarm > 0 {
		o.plan.OpenWarmup = *openWarm
	}
	switch {
	case *openWin > 0:
		o.plan.OpenWindow = *openWin
	case *openWin < 0:
		o.plan.Fractions = nil
	}
	if !*heartbeat {
		o.plan.Heartbeat = nil
	} else {
		if *hbRate > 0 {
			o.plan.Heartbeat.Rate = *hbRate
		}
		if *hbRounds > 0 {
			o.plan.Heartbeat.Rounds = *hbRounds
		}
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if o.reportFrom != "" {
		return reportFrom(o, stdout, log)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	res, err := measureAll(ctx, log, o, stderr)
	if res != nil {
		if werr := writeResults(o.out, res); werr != nil {
			log.Error("results not written", "err", werr)
			return 1
		}
		fmt.Fprintf(stdout, "results in %s\n", o.out)
		for _, g := range res.Goals {
			fmt.Fprintf(stdout, "  %-55s %-12s %s\n", g.Name, g.verdictText("met", "NOT met"), g.Measured)
		}
	}
	if err != nil {
		log.Error("benchmark failed", "err", err)
		return 1
	}
	return 0
}

// reportFrom writes the results of o.reportFrom's run again into o.out,
// the goals evaluated by this build.
func reportFrom(o options, stdout io.Writer, log *slog.Logger) int {
	b, err := os.ReadFile(o.reportFrom)
	if err != nil {
		log.Error("-report-from", "err", err)
		return 1
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		log.Error("-report-from", "file", o.reportFrom, "err", err)
		return 1
	}
	res.Goals = nil
	res.evaluate()
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		log.Error("-report-from", "err", err)
		return 1
	}
	if err := writeResults(o.out, &res); err != nil {
		log.Error("results not written", "err", err)
		return 1
	}
	fmt.Fprintf(stdout, "results of %s evaluated again in %s\n", o.reportFrom, o.out)
	return 0
}

// measureAll runs the micro-benchmarks, then the load harness.
func measureAll(ctx context.Context, log *slog.Logger, o options, stderr io.Writer) (*Results, error) {
	start := time.Now()
	res := &Results{Generated: start.UTC().Format(time.RFC3339), Plan: o.plan, Machine: machine()}
	dir, err := os.MkdirTemp("", "bulkhead-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, err
	}
	if o.micro {
		log.Info("micro-benchmarks", "benchtime", o.plan.BenchTime, "count", o.plan.BenchCount)
		if res.Micro, err = runMicro(ctx, o.plan, stderr); err != nil {
			return nil, err
		}
		log.Info("profiling the hot path")
		prof, err := profileHotPath(ctx, dir, map[bool]string{true: "1s", false: "3s"}[o.quick])
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(o.out, "hotpath-profile.txt"), []byte(prof), 0o644); err != nil {
			return nil, err
		}
	}
	if o.e2e {
		if err := runHarness(ctx, log, o, dir, res); err != nil {
			res.Problems = append(res.Problems, err.Error())
			res.evaluate()
			return res, err
		}
	}
	res.Machine.LoadAvgEnd = loadavg()
	res.collectProblems()
	res.evaluate()
	log.Info("done", "took", time.Since(start).Round(time.Second))
	return res, nil
}

// runHarness starts every configuration and measures them.
func runHarness(ctx context.Context, log *slog.Logger, o options, dir string, res *Results) (err error) {
	bin := o.envoyBin
	if bin == "" {
		if bin, err = envoyproc.FindBinary(); err != nil {
			return err
		}
	}
	res.Machine.Envoy = envoyVersion(ctx, bin)
	var specs, heartbeat []configSpec
	if o.loops {
		specs = configSpecs(o.diagnostic)
	}
	if o.baseline != "" {
		specs = withBaseline(specs)
	}
	if o.configs != "" {
		keep := strings.Split(o.configs, ",")
		specs = slices.DeleteFunc(specs, func(s configSpec) bool { return s.Name != Floor && !slices.Contains(keep, s.Name) })
	} else {
		specs = slices.DeleteFunc(specs, func(s configSpec) bool { return s.optIn })
	}
	if o.plan.Heartbeat != nil {
		heartbeat = heartbeatSpecs()
	}
	for _, s := range slices.Concat(specs, heartbeat) {
		res.Configs = append(res.Configs, ConfigInfo{Name: s.Name, Title: s.Title})
	}
	e, err := startEnv(ctx, log, dir, bin, o.baseline, o.plan.UpstreamDelay, o.plan.ClosedConns, specs, heartbeat)
	if err != nil {
		return err
	}
	for _, st := range slices.Concat(e.stacks, e.heartbeat) {
		if i := slices.IndexFunc(res.Configs, func(c ConfigInfo) bool { return c.Name == st.spec.Name }); i >= 0 {
			res.Configs[i].RedisIdleFloor = st.floor
		}
	}
	defer func() {
		if d := e.sidecars[sidecarDaemon]; d != nil {
			if _, peak, merr := memory(d.PID()); merr == nil {
				res.DaemonPeakRSS = peak
			}
		}
		if serr := e.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	if res.DaemonIdle, err = e.idleMemory(ctx); err != nil {
		return err
	}
	if o.loops {
		if res.Phases, err = e.runLoad(ctx, o.plan); err != nil {
			return err
		}
	}
	if hp := o.plan.Heartbeat; hp != nil {
		rate := hp.shortRate(res.medianClosed(Bulkhead))
		log.Info("heartbeat cost", "short_rate", rate, "rounds", hp.Rounds)
		phases, err := e.runHeartbeat(ctx, o.plan, rate)
		res.Phases = append(res.Phases, phases...)
		return err
	}
	return nil
}

func writeResults(dir string, r *Results) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "results.md"))
	if err != nil {
		return err
	}
	if err := writeMarkdown(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	plot := filepath.Join(dir, "latency.png")
	err = writePlot(plot, r)
	if errors.Is(err, errNothingToPlot) {
		// -loops=false or no open loop: a plot left by an earlier run would
		// pass for this one's.
		if err := os.Remove(plot); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return err
}

// machine describes this host.
func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), LoadAvgStart: loadavg(), CPU: "unknown", Kernel: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return m
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
