package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// The server accepts watch intervals within these bounds.
const (
	minInterval = 100 * time.Millisecond
	maxInterval = time.Minute
)

func checkInterval(flag string, d time.Duration) error {
	if d < minInterval || d > maxInterval {
		return usagef("--%s %s: must be within [%s, %s]", flag, d, minInterval, maxInterval)
	}
	return nil
}

func statusCmd() *command {
	return &command{
		name:    "status",
		usage:   "status [--sample 1s]",
		summary: "show every bulkhead: limit, active, queued and rates",
		help: `Prints one line per bulkhead:

  KIND        what it counts: requests, or connections (TCP)
  LIMIT       max_concurrent in force
  ACTIVE      permits in use (requests or connections in flight)
  QUEUED      waiters of every class
  ADMITTED/S  grants per second
  REJECTED/S  rejections per second (every reason)
  FAILURES/S  admitted requests that ended with a 5xx or a reset, per second
              ("-" when the server does not report outcomes)
  SOURCE      file (the config file's settings), override (changed at run
              time with bulkheadctl set) or removed (gone from the file,
              draining)

Rates are measured over --sample: status takes two readings that far apart.
--sample 0 takes one reading and prints no rates; with the Redis ledger it
prints a line about the ledger above the table: capacity leases or per
request, its state at this replica, the replicas and on_unavailable.`,
		setup: func(fs *pflag.FlagSet) func(context.Context, *app, []string) error {
			sample := fs.Duration("sample", time.Second, "time between the two readings rates are computed from (0: no rates)")
			return func(ctx context.Context, a *app, args []string) error {
				if err := noArgs("status", args); err != nil {
					return err
				}
				if *sample != 0 {
					if err := checkInterval("sample", *sample); err != nil {
						return err
					}
				}
				return a.status(ctx, *sample)
			}
		},
	}
}

func (a *app) status(ctx context.Context, sample time.Duration) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	if sample == 0 {
		ctx, cancel := a.callCtx(ctx)
		defer cancel()
		resp, err := c.ListBulkheads(ctx, &adminv1.ListBulkheadsRequest{})
		if err != nil {
			return a.explain(err)
		}
		if l := resp.GetLedger(); l.GetBackend() == "redis" {
			path := "per request"
			if l.GetCapacityLeases() {
				path = "capacity leases"
			}
			fmt.Fprintf(a.stdout, "ledger: redis, %s, %s at this replica, %d replicas, on_unavailable %s\n",
				path, l.GetState(), l.GetReplicas(), l.GetOnUnavailable())
		}
		return writeTable(a.stdout, frame{bulkheads: resp.GetBulkheads()}, nil)
	}
	ctx, cancel := context.WithTimeout(ctx, a.g.timeout+sample)
	defer cancel()
	stream, err := c.WatchBulkheads(ctx, &adminv1.WatchBulkheadsRequest{Interval: durationpb.New(sample)})
	if err != nil {
		return a.explain(err)
	}
	first, err := stream.Recv()
	if err != nil {
		return a.explain(err)
	}
	second, err := stream.Recv()
	if err != nil {
		return a.explain(err)
	}
	prev := frameOf(first)
	return writeTable(a.stdout, frameOf(second), &prev)
}

func watchCmd() *command {
	return &command{
		name:    "watch",
		usage:   "watch [--interval 1s] [--count N]",
		summary: "a live-refreshing status table, until Ctrl-C",
		help: `Shows the status table (see bulkheadctl help status) and redraws it every
--interval, with rates measured between consecutive readings. On a terminal
the screen is redrawn in place; otherwise each reading is printed after the
last. Ctrl-C ends it with exit code 0.`,
		setup: func(fs *pflag.FlagSet) func(context.Context, *app, []string) error {
			interval := fs.Duration("interval", time.Second, "time between readings, within [100ms, 1m]")
			count := fs.Int("count", 0, "stop after this many readings (0: until Ctrl-C)")
			return func(ctx context.Context, a *app, args []string) error {
				if err := noArgs("watch", args); err != nil {
					return err
				}
				if err := checkInterval("interval", *interval); err != nil {
					return err
				}
				if *count < 0 {
					return usagef("--count %d: must not be negative", *count)
				}
				return a.watch(ctx, *interval, *count)
			}
		},
	}
}

func (a *app) watch(ctx context.Context, interval time.Duration, count int) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.WatchBulkheads(ctx, &adminv1.WatchBulkheadsRequest{Interval: durationpb.New(interval)})
	if err != nil {
		return a.explain(err)
	}
	var prev *frame
	for n := 0; count == 0 || n < count; n++ {
		m, err := stream.Recv()
		if status.Code(err) == codes.Canceled && ctx.Err() != nil {
			return nil // Ctrl-C
		}
		if err != nil {
			return a.explain(err)
		}
		cur := frameOf(m)
		switch {
		case a.tty:
			fmt.Fprint(a.stdout, "\x1b[H\x1b[2J") // home, clear screen
		case n > 0:
			fmt.Fprintln(a.stdout)
		}
		fmt.Fprintf(a.stdout, "%s  every %s  %s\n\n", a.g.addr, interval, cur.at.UTC().Format(time.RFC3339))
		if err := writeTable(a.stdout, cur, prev); err != nil {
			return err
		}
		prev = &cur
	}
	return nil
}
