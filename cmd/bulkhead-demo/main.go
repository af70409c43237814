package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"syscall"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run runs the mode args name and returns the exit status: 0 after a clean
// run, 1 when it failed, 2 for bad arguments.
func run(args []string, stdout, stderr io.Writer) int {
	mode := ""
	if len(args) > 0 && (args[0] == "upstream" || args[0] == "traffic") {
		mode, args = args[0], args[1:]
	}
	ctx, abort, release := interrupts(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer release()

	var err error
	switch mode {
	case "upstream":
		var o upstreamOptions
		if o, err = parseUpstreamFlags(args, stderr); err == nil {
			err = runUpstream(ctx, o, stdout)
		}
	case "traffic":
		var o options
		if o, err = parseTrafficFlags(args, stderr); err == nil {
			err = newDemo(o, stdout).runTraffic(ctx, abort)
		}
	default:
		var o options
		if o, err = parseFlags(args, stderr); err == nil {
			err = newDemo(o, stdout).runLocal(ctx, abort)
		}
	}
	var usage *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "bulkhead-demo: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "\nbulkhead-demo: %v\n", err)
		return 1
	}
}
