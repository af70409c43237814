package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// usageError is a bad command line (exit status 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// options are the flags of the local demo and of traffic mode.
type options struct {
	duration     time.Duration
	slowAfter    time.Duration
	slowFor      time.Duration
	slowDelay    time.Duration
	drainTimeout time.Duration

	// The local demo's.
	bulkheadBin string
	envoyBin    string
	configPath  string
	keepLogs    bool

	// Traffic mode's: where Envoy, the daemon's /metrics and each upstream's
	// control API are, how long to wait for them, how often to print.
	envoyURL   string
	metricsURL string
	control    map[string]string // route -> base URL
	waitReady  time.Duration
	printEvery time.Duration
}

// defaultDrainTimeout bounds the wait for the requests in flight at the
// stop: the slow catalog's 2 s (+25%) and its 500 ms queue fit in it.
const defaultDrainTimeout = 3 * time.Second

// newFlagSet returns a flag set named name, writing to stderr, with the
// flags the local demo and traffic mode share (commonFlags).
func newFlagSet(name string, stderr io.Writer, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	commonFlags(fs, o)
	return fs
}

// commonFlags registers the flags the local demo and traffic mode share.
func commonFlags(fs *flag.FlagSet, o *options) {
	fs.DurationVar(&o.duration, "duration", 0, "how long to run; 0 = until Ctrl-C")
	fs.DurationVar(&o.slowAfter, "slow-after", 10*time.Second, "when catalog turns slow")
	fs.DurationVar(&o.slowFor, "slow-for", 15*time.Second, "how long catalog stays slow; 0 = for the rest of the run")
	fs.DurationVar(&o.slowDelay, "slow-delay", 2*time.Second, "catalog's response time while slow")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", defaultDrainTimeout,
		"at the stop, how long the requests in flight may take to finish (a second Ctrl-C cuts it short)")
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := newFlagSet("bulkhead-demo", stderr, &o)
	fs.StringVar(&o.bulkheadBin, "bulkhead-bin", "", "the bulkhead daemon (default: bulkhead next to this executable, then bin/bulkhead)")
	fs.StringVar(&o.envoyBin, "envoy-bin", "", "the envoy binary (default: $ENVOY_BIN, .venv/bin/envoy, envoy on $PATH)")
	fs.StringVar(&o.configPath, "config", "", "bulkhead config file (default: the embedded demo.yaml)")
	fs.BoolVar(&o.keepLogs, "keep-logs", false, "keep the daemon's and Envoy's logs after a clean run")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bulkhead-demo [flags]\n"+
			"       bulkhead-demo upstream --help\n"+
			"       bulkhead-demo traffic --help\n\n"+
			"Runs three upstreams, the bulkhead daemon and Envoy on 127.0.0.1, drives traffic\n"+
			"through Envoy, makes catalog slow, and prints a live table. Ctrl-C stops it.\n\n")
		fs.PrintDefaults()
	}
	o.printEvery = time.Second
	return o, parse(fs, args, &o)
}

// parseTrafficFlags parses traffic mode's flags.
func parseTrafficFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := newFlagSet("bulkhead-demo traffic", stderr, &o)
	fs.StringVar(&o.envoyURL, "envoy", "http://127.0.0.1:10000", "Envoy's listener, with the demo routes /catalog, /auth, /orders")
	fs.StringVar(&o.metricsURL, "metrics", "http://127.0.0.1:9090/metrics", "the bulkhead daemon's /metrics")
	control := fs.String("control", "", "each upstream's control API, route=URL,... (see bulkhead-demo upstream); a route without one\n"+
		"shows no peak concurrency, and catalog without one is never slowed")
	fs.DurationVar(&o.waitReady, "wait", 2*time.Minute, "how long to wait for Envoy and the daemon to answer")
	fs.DurationVar(&o.printEvery, "print-every", time.Second, "how often to print the table")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bulkhead-demo traffic [flags]\n\n"+
			"Drives the demo's traffic through an Envoy that runs elsewhere (docker-compose.yaml),\n"+
			"slows catalog through its control API, and prints the demo's table. Ctrl-C stops it.\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args, &o); err != nil {
		return o, err
	}
	var err error
	if o.control, err = parseControl(*control); err != nil {
		return o, err
	}
	for _, u := range []string{o.envoyURL, o.metricsURL} {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return o, usagef("%q is not an http:// URL", u)
		}
	}
	o.envoyURL = strings.TrimSuffix(o.envoyURL, "/")
	if o.printEvery < time.Second || o.waitReady <= 0 {
		return o, usagef("--print-every must be at least 1s and --wait positive")
	}
	return o, nil
}

// parseControl parses route=URL,route=URL for routes of demoRoutes.
func parseControl(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		name, u, ok := strings.Cut(part, "=")
		if _, known := routeNamed(name); !ok || !known {
			return nil, usagef("--control %q: want route=URL with a route of %v", part, routeNames())
		}
		if p, err := url.Parse(u); err != nil || p.Scheme != "http" || p.Host == "" {
			return nil, usagef("--control %s: %q is not an http:// URL", name, u)
		}
		out[name] = strings.TrimSuffix(u, "/")
	}
	return out, nil
}

// parse parses args into fs and checks what every mode shares.
func parse(fs *flag.FlagSet, args []string, o *options) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q (see --help)", fs.Args())
	}
	if o.duration < 0 || o.slowAfter < 0 || o.slowFor < 0 || o.slowDelay < 0 || o.drainTimeout < 0 {
		return usagef("durations must not be negative")
	}
	return nil
}
