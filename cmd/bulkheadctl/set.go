package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

const overrideHelp = `A change made here overrides the config file for that bulkhead until the
file's own entry for it changes on a reload (the file wins), until
bulkheadctl reset NAME, or until Bulkhead restarts (overrides live in memory
only). Reloads that do not touch that bulkhead keep the override.`

func setCmd() *command {
	return &command{
		name:    "set",
		usage:   "set NAME [--max-concurrent N] [--max-queue N] [--max-wait D] [--reserve-critical F] [--reserve-normal F]",
		summary: "change a bulkhead's settings at run time",
		help: `Sends only the flags given; the others keep their values. The merged
settings are checked as a whole and refused, changing nothing, when
invalid. Prints each changed setting as before -> after.

` + overrideHelp,
		setup: func(fs *pflag.FlagSet) func(context.Context, *app, []string) error {
			maxConcurrent := fs.Int32("max-concurrent", 0, "the limit: at most `N` permits in use at once (N >= 1)")
			maxQueue := fs.Int32("max-queue", 0, "at most `N` waiters (0: fail fast)")
			maxWait := fs.Duration("max-wait", 0, "how long a waiter may wait, a `duration` such as 500ms (0: until its gRPC deadline)")
			reserveCritical := fs.Float64("reserve-critical", 0, "`fraction` of the limit only critical requests may use, in [0, 1)")
			reserveNormal := fs.Float64("reserve-normal", 0, "further `fraction` best_effort requests may not use, in [0, 1)")
			return func(ctx context.Context, a *app, args []string) error {
				name, err := nameArg("set", args)
				if err != nil {
					return err
				}
				req := &adminv1.UpdateBulkheadRequest{Name: name}
				if fs.Changed("max-concurrent") {
					req.MaxConcurrent = proto.Int32(*maxConcurrent)
				}
				if fs.Changed("max-queue") {
					req.MaxQueue = proto.Int32(*maxQueue)
				}
				if fs.Changed("max-wait") {
					req.MaxWait = durationpb.New(*maxWait)
				}
				if fs.Changed("reserve-critical") {
					req.ReserveCritical = proto.Float64(*reserveCritical)
				}
				if fs.Changed("reserve-normal") {
					req.ReserveNormal = proto.Float64(*reserveNormal)
				}
				if req.MaxConcurrent == nil && req.MaxQueue == nil && req.MaxWait == nil && req.ReserveCritical == nil && req.ReserveNormal == nil {
					return usagef("set: nothing to change; give at least one of --max-concurrent, --max-queue, --max-wait, --reserve-critical, --reserve-normal")
				}
				c, err := a.client()
				if err != nil {
					return err
				}
				ctx, cancel := a.callCtx(ctx)
				defer cancel()
				resp, err := c.UpdateBulkhead(ctx, req)
				if err != nil {
					return a.explain(err)
				}
				if writeChanges(a.stdout, name, resp.GetPrevious(), resp.GetBulkhead()) == 0 {
					fmt.Fprintf(a.stdout, "%s: no change (the values given were already in force)\n", name)
				}
				fmt.Fprintf(a.stdout, "%s: run-time override in force until the file's entry changes, bulkheadctl reset %s, or a restart\n", name, name)
				return nil
			}
		},
	}
}

func resetCmd() *command {
	return &command{
		name:    "reset",
		usage:   "reset NAME",
		summary: "drop a run-time override: back to the config file's settings",
		help: `Drops the override made with bulkheadctl set: the config file's settings
are in force again. Prints each setting that changes as before -> after.

` + overrideHelp,
		setup: func(*pflag.FlagSet) func(context.Context, *app, []string) error {
			return func(ctx context.Context, a *app, args []string) error {
				name, err := nameArg("reset", args)
				if err != nil {
					return err
				}
				c, err := a.client()
				if err != nil {
					return err
				}
				ctx, cancel := a.callCtx(ctx)
				defer cancel()
				resp, err := c.ResetBulkhead(ctx, &adminv1.ResetBulkheadRequest{Name: name})
				if err != nil {
					return a.explain(err)
				}
				if resp.GetPrevious().GetOverride() == nil {
					fmt.Fprintf(a.stdout, "%s: no override; the config file's settings were already in force\n", name)
					return nil
				}
				writeChanges(a.stdout, name, resp.GetPrevious(), resp.GetBulkhead())
				fmt.Fprintf(a.stdout, "%s: override dropped; the config file's settings are in force\n", name)
				return nil
			}
		},
	}
}

// writeChanges prints "NAME: field before -> after" for every setting that
// differs and returns how many did.
func writeChanges(w io.Writer, name string, before, after *adminv1.Bulkhead) int {
	b, a := admin.NewView(before).Settings, admin.NewView(after).Settings
	n := 0
	change := func(field string, from, to any) {
		if from != to {
			fmt.Fprintf(w, "%s: %s %v -> %v\n", name, field, from, to)
			n++
		}
	}
	change("max_concurrent", b.MaxConcurrent, a.MaxConcurrent)
	change("max_queue", b.MaxQueue, a.MaxQueue)
	change("max_wait", b.MaxWait, a.MaxWait)
	change("reserve_critical", b.ReserveCritical, a.ReserveCritical)
	change("reserve_normal", b.ReserveNormal, a.ReserveNormal)
	return n
}
