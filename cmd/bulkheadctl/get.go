package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

func getCmd() *command {
	return &command{
		name:    "get",
		usage:   "get NAME [-o table|json|yaml]",
		summary: "show one bulkhead in full",
		help: `Shows a bulkhead's settings in force, the config file's settings, the
run-time override (who made it, when) if any, and its counters.

-o json prints the same object as the JSON API's GET /v1/bulkheads/NAME
("bulkhead" member); -o yaml the same in YAML. Durations are Go durations
("500ms").`,
		setup: func(fs *pflag.FlagSet) func(context.Context, *app, []string) error {
			output := fs.StringP("output", "o", "table", "output format: table, json or yaml")
			return func(ctx context.Context, a *app, args []string) error {
				name, err := nameArg("get", args)
				if err != nil {
					return err
				}
				switch *output {
				case "table", "json", "yaml":
				default:
					return usagef("get: -o %q: want table, json or yaml", *output)
				}
				c, err := a.client()
				if err != nil {
					return err
				}
				ctx, cancel := a.callCtx(ctx)
				defer cancel()
				resp, err := c.GetBulkhead(ctx, &adminv1.GetBulkheadRequest{Name: name})
				if err != nil {
					return a.explain(err)
				}
				return writeBulkhead(a.stdout, resp.GetBulkhead(), *output)
			}
		},
	}
}

// writeEncoded writes v as JSON ("json") or YAML (any other format).
func writeEncoded(w io.Writer, v any, format string) error {
	if format == "json" {
		out, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", out)
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return err
	}
	return enc.Close()
}

func writeBulkhead(w io.Writer, b *adminv1.Bulkhead, format string) error {
	v := admin.NewView(b)
	if format != "table" {
		return writeEncoded(w, v, format)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	row("NAME", "%s", v.Name)
	row("KIND", "%s", v.Kind)
	switch {
	case v.Closed:
		row("SOURCE", "removed from the config file; draining")
	case v.Override != nil:
		row("SOURCE", "override by %s at %s", v.Override.Actor, v.Override.Time.UTC().Format(time.RFC3339))
	default:
		row("SOURCE", "config file")
	}
	s, f := v.Settings, v.FileSettings
	fileNote := func(differs bool, value any) string {
		if !differs {
			return ""
		}
		return fmt.Sprintf("  (file: %v)", value)
	}
	row("MAX CONCURRENT", "%d%s", s.MaxConcurrent, fileNote(s.MaxConcurrent != f.MaxConcurrent, f.MaxConcurrent))
	row("MAX QUEUE", "%d%s", s.MaxQueue, fileNote(s.MaxQueue != f.MaxQueue, f.MaxQueue))
	row("MAX WAIT", "%s%s", s.MaxWait, fileNote(s.MaxWait != f.MaxWait, f.MaxWait))
	row("RESERVE", "critical %v, normal %v%s", s.ReserveCritical, s.ReserveNormal,
		fileNote(s.ReserveCritical != f.ReserveCritical || s.ReserveNormal != f.ReserveNormal,
			fmt.Sprintf("critical %v, normal %v", f.ReserveCritical, f.ReserveNormal)))
	row("LEASE TTL", "%s", v.LeaseTTL)
	row("IN USE", "%d", v.InUse)
	row("QUEUED", "%s", classes(v.Queued))
	row("ADMITTED", "%s", classes(v.Counters.Admitted))
	r := v.Counters.Rejected
	row("REJECTED", "queue_full %d, shed %d, timeout %d, unknown_bulkhead %d, circuit_open %d",
		r.QueueFull, r.Shed, r.Timeout, r.UnknownBulkhead, r.CircuitOpen)
	row("CANCELLED", "%d", v.Counters.Cancelled)
	row("RELEASED", "%d (duplicate releases %d)", v.Counters.Released, v.Counters.DuplicateReleases)
	if o := v.Outcomes; o != nil {
		row("OUTCOMES", "success %d, failure %d, aborted %d", o.Success, o.Failure, o.Aborted)
	}
	row("TENANTS", "%d", v.Tenants)
	if cv := v.Circuit; cv != nil {
		row("CIRCUIT", "%s", circuitRow(cv))
	}
	return tw.Flush()
}

func classes(p admin.PriorityView) string {
	return strings.Join([]string{
		fmt.Sprintf("critical %d", p.Critical),
		fmt.Sprintf("normal %d", p.Normal),
		fmt.Sprintf("best_effort %d", p.BestEffort),
	}, ", ")
}
