// Command bulkhead-demo shows Bulkhead at work on one machine: three fake
// upstreams (catalog, auth, orders), the bulkhead daemon, and a real Envoy in
// front of them, with live traffic. After a while catalog turns slow; the
// live table shows catalog's bulkhead fill up and shed while auth and orders
// stay fast.
//
//	make demo                     # until Ctrl-C
//	make demo DURATION=60s        # bin/bulkhead-demo --duration 60s
//
// Every child process runs in its own process group and is stopped on every
// exit path; on Linux the kernel also kills them if the demo itself dies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bulkhead-demo: %v\n", err)
		os.Exit(2)
	}
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = newDemo(opts, os.Stdout, stopSignals).run(ctx)
	stopSignals()
	if err != nil {
		fmt.Fprintf(os.Stderr, "\nbulkhead-demo: %v\n", err)
		os.Exit(1)
	}
}

// options are the demo's command-line flags.
type options struct {
	duration    time.Duration
	bulkheadBin string
	envoyBin    string
	configPath  string
	slowAfter   time.Duration
	slowFor     time.Duration
	slowDelay   time.Duration
	keepLogs    bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bulkhead-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", 0, "how long to run; 0 = until Ctrl-C")
	fs.StringVar(&o.bulkheadBin, "bulkhead-bin", "", "the bulkhead daemon (default: bulkhead next to this executable, then bin/bulkhead)")
	fs.StringVar(&o.envoyBin, "envoy-bin", "", "the envoy binary (default: $ENVOY_BIN, .venv/bin/envoy, envoy on $PATH)")
	fs.StringVar(&o.configPath, "config", "", "bulkhead config file (default: the embedded demo.yaml)")
	fs.DurationVar(&o.slowAfter, "slow-after", 10*time.Second, "when catalog turns slow")
	fs.DurationVar(&o.slowFor, "slow-for", 15*time.Second, "how long catalog stays slow; 0 = for the rest of the run")
	fs.DurationVar(&o.slowDelay, "slow-delay", 2*time.Second, "catalog's response time while slow")
	fs.BoolVar(&o.keepLogs, "keep-logs", false, "keep the daemon's and Envoy's logs after a clean run")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bulkhead-demo [flags]\n\n"+
			"Runs three upstreams, the bulkhead daemon and Envoy on 127.0.0.1, drives traffic\n"+
			"through Envoy, makes catalog slow, and prints a live table. Ctrl-C stops it.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q (see --help)", fs.Args())
	}
	if o.duration < 0 || o.slowAfter < 0 || o.slowFor < 0 || o.slowDelay < 0 {
		return o, errors.New("durations must not be negative")
	}
	return o, nil
}
