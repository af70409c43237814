package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

//go:embed demo.yaml
var demoConfig []byte

// demo is one run: its children (local demo), its traffic and what the
// table shows. It is used by one goroutine (run's).
type demo struct {
	envoyLog *os.File // Envoy's output, open while Envoy runs
	opts     options
	out      io.Writer
	tty      bool

	// What the traffic goes to and what the table reads: set by startAll,
	// or from the flags in traffic mode.
	envoyURL   string              // http://host:port of Envoy's listener
	metricsURL string              // the daemon's /metrics
	upstreams  map[string]upstream // by route; a route without one shows no peak

	// The local demo's children; nil in traffic mode.
	logDir string
	local  []*testbed.Upstream
	daemon *daemon
	envoy  *envoyproc.Proc

	flows   []*flow
	stopped bool

	start     time.Time // when traffic began
	slow      bool
	slowSince time.Duration
	events    []string
	view      view

	// The end of the traffic, for the summary: the requests in flight when
	// it stopped, and what cut the wait for them short ("" when none).
	inFlightAtStop int
	drainCut       string
}

func newDemo(opts options, out io.Writer) *demo {
	return &demo{
		opts:      opts,
		out:       out,
		tty:       isTerminal(out),
		upstreams: map[string]upstream{},
		view:      newView(),
	}
}

// runLocal starts everything, drives traffic until ctx ends or --duration
// has passed, stops everything and prints the summary. abort ends the wait
// for the requests in flight (see drive). Children are stopped on every
// return path, panics included.
func (d *demo) runLocal(ctx, abort context.Context) (err error) {
	bulkheadBin, err := findBulkhead(d.opts.bulkheadBin)
	if err != nil {
		return err
	}
	envoyBin, err := findEnvoy(d.opts.envoyBin)
	if err != nil {
		return err
	}
	ports := slices.Clone(envoyAndUpstreamPorts)
	if d.opts.configPath == "" {
		ports = append(ports, daemonPorts...)
	}
	if err := checkPorts(ports); err != nil {
		return err
	}
	if d.logDir, err = os.MkdirTemp("", "bulkhead-demo-"); err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer func() {
		if err != nil || d.opts.keepLogs {
			fmt.Fprintf(d.out, "Logs of the daemon and Envoy are in %s\n", d.logDir)
			return
		}
		_ = os.RemoveAll(d.logDir)
	}()
	// Idempotent; the normal path calls it earlier and reports its error.
	defer func() { err = errors.Join(err, d.shutdown()) }()

	if err := d.startAll(ctx, bulkheadBin, envoyBin); err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted during startup")
		}
		return err
	}
	return d.drive(ctx, abort)
}

// startAll starts the upstreams, the daemon and Envoy, in that order.
func (d *demo) startAll(ctx context.Context, bulkheadBin, envoyBin string) error {
	configPath := d.opts.configPath
	if configPath == "" {
		configPath = filepath.Join(d.logDir, "bulkhead.yaml")
		if err := os.WriteFile(configPath, demoConfig, 0o600); err != nil {
			return fmt.Errorf("write demo config: %w", err)
		}
	}
	d.say("Starting upstreams catalog, auth and orders on 127.0.0.1:8081-8083")
	for _, r := range demoRoutes {
		u, err := testbed.NewUpstream(r.name, r.upstream)
		if err != nil {
			return err
		}
		u.SetDelayRange(r.fast[0], r.fast[1])
		d.local = append(d.local, u)
		d.upstreams[r.name] = localUpstream{u}
	}

	d.say("Starting the bulkhead daemon: %s --config %s", bulkheadBin, configPath)
	dm, err := startDaemon(ctx, bulkheadBin, configPath, d.logDir)
	if err != nil {
		return err
	}
	d.daemon = dm
	d.metricsURL = "http://" + dm.httpAddr + "/metrics"
	d.say("  ready: gRPC %s, HTTP %s (metrics at http://%s/metrics)", dm.grpcAddr, dm.httpAddr, dm.httpAddr)
	if dm.adminAddr != "" {
		d.say("  admin API %s: in another terminal, bin/bulkheadctl --addr %s status (or watch, or set catalog --max-concurrent 20)",
			dm.adminAddr, dm.adminAddr)
	}

	params := envoy.DemoParams()
	host, portStr, err := net.SplitHostPort(dm.grpcAddr)
	if err != nil {
		return fmt.Errorf("daemon gRPC address %q: %w", dm.grpcAddr, err)
	}
	portNum, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("daemon gRPC address %q: %w", dm.grpcAddr, err)
	}
	params.Bulkhead = envoy.Endpoint{Host: host, Port: portNum}
	cfg, err := envoy.Render(params)
	if err != nil {
		return fmt.Errorf("render the Envoy config: %w", err)
	}
	envoyLog, err := os.Create(filepath.Join(d.logDir, "envoy.log"))
	if err != nil {
		return fmt.Errorf("envoy log: %w", err)
	}
	// Envoy's output is copied into it until Envoy exits (envoyproc keeps a
	// tail too): closed by shutdown, after Envoy stopped. Envoy writes at
	// runtime and on its way out (its RTDS stream closing, for one).
	d.envoyLog = envoyLog
	d.say("Starting Envoy: %s (listener 127.0.0.1:%d, admin 127.0.0.1:%d)", envoyBin, params.ListenerPort, params.AdminPort)
	proc, err := envoyproc.Start(ctx, envoyproc.Options{
		Binary:      envoyBin,
		ConfigYAML:  cfg,
		Concurrency: 2,
		Stderr:      envoyLog,
	})
	if err != nil {
		return fmt.Errorf("start envoy: %w", err)
	}
	d.envoy = proc
	listener, err := proc.ListenerAddr(ctx, envoy.DefaultListenerName)
	if err != nil {
		return fmt.Errorf("envoy listener: %w", err)
	}
	d.envoyURL = "http://" + listener
	d.flows = demoFlows()
	return newLoads(d.flows, d.envoyURL, d.opts.duration)
}

// drive runs the traffic and the live table until ctx ends (Ctrl-C),
// --duration has passed or a child dies; then it stops the traffic (see
// stopTraffic), stops everything and prints the summary. abort ends the wait
// for the requests in flight.
func (d *demo) drive(ctx, abort context.Context) error {
	// The requests live until abort, not ctx: Ctrl-C stops sending, not them.
	loadCtx, cancelLoads := context.WithCancel(abort)
	defer cancelLoads()
	d.start = time.Now()
	loadsDone := runLoads(loadCtx, d.flows)
	defer func() { cancelLoads(); <-loadsDone }() // also on a panic below

	var end <-chan time.Time
	if d.opts.duration > 0 {
		t := time.NewTimer(d.opts.duration)
		defer t.Stop()
		end = t.C
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	printEvery := max(int(d.opts.printEvery.Round(time.Second)/time.Second), 1)
	d.event("traffic started: catalog 50/s (4 critical, 31 normal, 15 best_effort), auth 40/s, orders 40/s")
	var failure error
loop:
	for ticks := 1; ; ticks++ {
		select {
		case <-tick.C:
			d.phase(ctx)
			d.view.update(ctx, d)
			if ticks%printEvery == 0 {
				d.render()
			}
		case <-end:
			d.event("--duration %v reached", d.opts.duration)
			break loop
		case <-ctx.Done():
			fmt.Fprintln(d.out, "\nInterrupted: stopping")
			break loop
		case <-loadsDone:
			break loop
		case <-d.envoyDone():
			failure = fmt.Errorf("envoy exited unexpectedly (%w); its log: %s", d.envoy.Wait(), filepath.Join(d.logDir, "envoy.log"))
			break loop
		case <-d.daemonDone():
			failure = fmt.Errorf("bulkhead daemon exited unexpectedly (%v); its log:\n%s", d.daemon.waitErr, d.daemon.logTail())
			break loop
		}
	}

	d.stopTraffic(ctx, abort, loadsDone, cancelLoads)
	d.view.final(d) // metrics while the daemon still runs

	stopErr := d.shutdown()
	d.summary(stopErr)
	return errors.Join(failure, stopErr)
}

// stopTraffic stops sending and lets the requests in flight finish, for up
// to --drain-timeout. The next Ctrl-C (ctx's end, or abort's after it) cuts
// the wait short; the requests still out are then cancelled.
func (d *demo) stopTraffic(ctx, abort context.Context, loadsDone <-chan struct{}, cancelLoads func()) {
	d.inFlightAtStop = stopLoads(d.flows)
	cut := abort.Done()
	if ctx.Err() == nil {
		cut = ctx.Done()
	}
	if d.inFlightAtStop > 0 {
		fmt.Fprintf(d.out, "Stopping traffic: letting the %d requests in flight finish (at most %v; Ctrl-C to cut it short)...\n",
			d.inFlightAtStop, d.opts.drainTimeout)
	} else {
		fmt.Fprintln(d.out, "Stopping traffic...")
	}
	timer := time.NewTimer(d.opts.drainTimeout)
	defer timer.Stop()
	select {
	case <-loadsDone:
		// The requests live until abort: the second Ctrl-C ends them too,
		// and their end can be seen before the Ctrl-C itself.
		select {
		case <-cut:
			d.drainCut = "by Ctrl-C"
		default:
		}
	case <-timer.C:
		d.drainCut = fmt.Sprintf("when the %v wait ran out (--drain-timeout)", d.opts.drainTimeout)
	case <-cut:
		d.drainCut = "by Ctrl-C"
	}
	cancelLoads()
	<-loadsDone
}

// envoyDone and daemonDone are closed when the local demo's Envoy or daemon
// exits; nil (never ready) in traffic mode.
func (d *demo) envoyDone() <-chan struct{} {
	if d.envoy == nil {
		return nil
	}
	return d.envoy.Done()
}

func (d *demo) daemonDone() <-chan struct{} {
	if d.daemon == nil {
		return nil
	}
	return d.daemon.done
}

// phase turns catalog slow after --slow-after and fast again after
// --slow-for. A change that fails is tried again at the next tick.
func (d *demo) phase(ctx context.Context) {
	elapsed := time.Since(d.start)
	catalog, ok := d.upstreams["catalog"]
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	switch {
	case !d.slow && d.slowSince == 0 && elapsed >= d.opts.slowAfter:
		// +-25%, so that slow responses do not all end in step.
		if err := catalog.SetDelayRange(ctx, d.opts.slowDelay*3/4, d.opts.slowDelay*5/4); err != nil {
			d.event("could not slow catalog down: %v", err)
			return
		}
		d.slow, d.slowSince = true, elapsed
		limit := ""
		if row := d.view.rows["catalog"]; row.known {
			limit = fmt.Sprintf(" (its bulkhead lets %s in at once)", fmtNum(row.limit))
		}
		d.event("catalog turned SLOW: requests now take about %v%s", d.opts.slowDelay, limit)
	case d.slow && d.opts.slowFor > 0 && elapsed >= d.slowSince+d.opts.slowFor:
		fast := demoRoutes[0].fast
		if err := catalog.SetDelayRange(ctx, fast[0], fast[1]); err != nil {
			d.event("could not speed catalog up: %v", err)
			return
		}
		d.slow = false
		d.event("catalog recovered: back to %v-%v per request", fast[0], fast[1])
	}
}

// shutdown stops the local demo's Envoy, then its daemon (SIGTERM, then
// SIGKILL after a timeout), then its upstreams. It is idempotent, and does
// nothing in traffic mode.
func (d *demo) shutdown() error {
	if d.stopped || (d.envoy == nil && d.daemon == nil && len(d.local) == 0) {
		return nil
	}
	d.stopped = true
	fmt.Fprintln(d.out, "Stopping Envoy, the bulkhead daemon and the upstreams...")
	var errs []error
	if d.envoy != nil {
		ctx, cancel := context.WithTimeout(context.Background(), envoyproc.DefaultStopTimeout)
		if err := d.envoy.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop envoy: %w", err))
		}
		cancel()
	}
	if d.envoyLog != nil {
		_ = d.envoyLog.Close()
	}
	if d.daemon != nil {
		if err := d.daemon.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, u := range d.local {
		if err := u.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// say prints a progress line.
func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, format+"\n", args...)
}

// event records a line for the table's event log and prints it when the
// output is not a terminal (where the table is redrawn).
func (d *demo) event(format string, args ...any) {
	line := fmt.Sprintf("t=%-4s ", fmtSeconds(time.Since(d.start))) + fmt.Sprintf(format, args...)
	d.events = append(d.events, line)
	if len(d.events) > 6 {
		d.events = d.events[len(d.events)-6:]
	}
	if !d.tty {
		fmt.Fprintf(d.out, ">>> %s\n", line)
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
