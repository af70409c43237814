package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// upstreamOptions are the flags of `bulkhead-demo upstream NAME`.
type upstreamOptions struct {
	name    string // a route of demoRoutes
	listen  string // the upstream's address
	control string // its control API's
}

func parseUpstreamFlags(args []string, stderr io.Writer) (upstreamOptions, error) {
	var o upstreamOptions
	fs := flag.NewFlagSet("bulkhead-demo upstream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "", "the upstream's address (default: its port of the local demo, on 127.0.0.1)")
	fs.StringVar(&o.control, "control", "127.0.0.1:0", "the control API's address (bulkhead-demo traffic --control)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bulkhead-demo upstream [flags] NAME\n\n"+
			"Serves the demo upstream NAME (%v) with its usual response time, and a control\n"+
			"API through which bulkhead-demo traffic slows it and reads its peak concurrency.\n"+
			"Ctrl-C or SIGTERM stops it.\n\n", routeNames())
		fs.PrintDefaults()
	}
	// The name may come before or after the flags.
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		o.name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, &usageError{err}
	}
	rest := fs.Args()
	if o.name == "" && len(rest) > 0 {
		o.name, rest = rest[0], rest[1:]
	}
	r, ok := routeNamed(o.name)
	if !ok || len(rest) > 0 {
		return o, usagef("want one upstream name of %v, got %q %q (see --help)", routeNames(), o.name, rest)
	}
	if o.listen == "" {
		o.listen = r.upstream
	}
	return o, nil
}

// runUpstream serves the upstream and its control API until ctx ends. Its
// first line on out gives both addresses.
func runUpstream(ctx context.Context, o upstreamOptions, out io.Writer) error {
	r, ok := routeNamed(o.name)
	if !ok {
		return usagef("unknown upstream %q", o.name)
	}
	u, err := testbed.NewUpstream(o.name, o.listen)
	if err != nil {
		return err
	}
	u.SetDelayRange(r.fast[0], r.fast[1])
	ln, err := net.Listen("tcp", o.control)
	if err != nil {
		return errors.Join(fmt.Errorf("control API: %w", err), u.Close())
	}
	var mu sync.Mutex // one line at a time on out
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	srv := &http.Server{Handler: controlHandler(u, logf), ReadHeaderTimeout: 5 * time.Second}
	logf("upstream %s on %s (response time %v-%v), control API on %s", o.name, u.Addr(), r.fast[0], r.fast[1], ln.Addr())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("control API: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return errors.Join(srv.Shutdown(shutdownCtx), u.Close())
	})
	err = g.Wait()
	logf("upstream %s stopped after serving %d requests (%d abandoned by their clients)", o.name, u.Served(), u.Aborted())
	return err
}
