package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

func circuitCmd() *command {
	return &command{
		name:    "circuit",
		usage:   "circuit NAME auto|force_open|force_closed",
		summary: "override a bulkhead's circuit breaker",
		help: `force_open refuses every request of the bulkhead (circuit_open) until
changed; force_closed lets every request through and records no outcome;
auto returns the breaker to its outcomes, closed with an empty window.
The mode lives in memory: a restart, or a reload that removes the
bulkhead's circuit_breaker, ends it. bulkheadctl get NAME shows the breaker.`,
		setup: func(*pflag.FlagSet) func(context.Context, *app, []string) error {
			return func(ctx context.Context, a *app, args []string) error {
				if len(args) != 2 {
					return usagef("circuit: want NAME and a mode (auto, force_open or force_closed), got: %s", strings.Join(args, " "))
				}
				name, mode := args[0], args[1]
				c, err := a.client()
				if err != nil {
					return err
				}
				ctx, cancel := a.callCtx(ctx)
				defer cancel()
				resp, err := c.SetCircuit(ctx, &adminv1.SetCircuitRequest{Name: name, Mode: mode})
				if err != nil {
					return a.explain(err)
				}
				cv := admin.NewView(resp.GetBulkhead()).Circuit
				if cv == nil {
					return fmt.Errorf("circuit: the server answered without the breaker")
				}
				fmt.Fprintf(a.stdout, "%s: circuit %s, mode %s\n", name, cv.State, cv.Mode)
				return nil
			}
		},
	}
}

// circuitRow is the CIRCUIT line of bulkheadctl get.
func circuitRow(cv *admin.CircuitView) string {
	return fmt.Sprintf("%s (mode %s) since %s; window %d calls, %d failed; refused %d; opened %d times",
		cv.State, cv.Mode, cv.Since, cv.WindowCalls, cv.WindowFailed, cv.Refused, cv.Opened)
}
