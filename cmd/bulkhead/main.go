// Command bulkhead is the Bulkhead daemon: Envoy's ext_authz and access-log
// services, enforcing concurrency bulkheads for a whole mesh.
//
//	bulkhead --config bulkhead.yaml
//
// Flags override the file and BULKHEAD_* environment variables; run
// `bulkhead --help` for the list. Exit status: 0 after a clean shutdown
// (SIGTERM or SIGINT), 1 when serving failed, 2 for bad flags or config
// (see helpTail).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/server"
	"github.com/bulkhead-mesh/bulkhead/pkg/version"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("bulkhead", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // help is printed below, to stdout
	fs.SortFlags = false
	config.RegisterFlags(fs)
	check := fs.Bool("check-config", false, "validate the configuration, print a summary and exit")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.BoolP("help", "h", false, "print this help and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			printHelp(stdout, fs)
			return 0
		}
		fmt.Fprintf(stderr, "bulkhead: %v (see bulkhead --help)\n", err)
		return 2
	}
	if help, _ := fs.GetBool("help"); help {
		printHelp(stdout, fs)
		return 0
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.String("bulkhead"))
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bulkhead: unexpected arguments %q (the config file is given with --config)\n", fs.Args())
		return 2
	}
	path, _ := fs.GetString(config.FlagConfig)
	cfg, err := config.Load(path, fs)
	if err != nil {
		fmt.Fprintf(stderr, "bulkhead: configuration refused:\n%v\n", err)
		return 2
	}
	empty := noBulkheads(cfg, path)
	if *check {
		if empty != "" {
			fmt.Fprintf(stderr, "bulkhead: %s (see pkg/config/testdata/example.yaml)\n", empty)
			return 1
		}
		fmt.Fprintf(stdout, "configuration OK: %d bulkheads, grpc %s, http %s\n", len(cfg.Bulkheads), cfg.Listen.GRPC, cfg.Listen.HTTP)
		for _, w := range cfg.Warnings {
			fmt.Fprintf(stdout, "warning: %s\n", w)
		}
		return 0
	}
	log := newLogger(cfg.Log, stderr)
	for _, w := range cfg.Warnings {
		log.Warn("configuration: deprecated setting", "warning", w)
	}
	if empty != "" {
		log.Warn(empty)
	}
	addrFile, _ := fs.GetString(config.FlagAddressFile)
	opts := []server.Option{server.WithAddressFile(addrFile)}
	if path != "" {
		opts = append(opts, server.WithConfigWatch(path, fs))
	}
	r, err := server.New(cfg, log, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "bulkhead: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := r.Run(ctx); err != nil {
		log.Error("bulkhead stopped", "err", err)
		return 1
	}
	return 0
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.Level}
	if c.Format == config.LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
