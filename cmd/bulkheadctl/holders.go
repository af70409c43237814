package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

func holdersCmd() *command {
	return &command{
		name:    "holders",
		usage:   "holders NAME [--limit N] [-o table|json|yaml]",
		summary: "show who holds a bulkhead's permits, oldest first",
		help: `Prints one line per permit the bulkhead holds, oldest first:

  NODE        the Envoy node that holds it ("-" when unknown)
  PRIORITY    its class; "unknown" for an adopted permit
  SOURCE      granted (admitted by this daemon) or adopted (learnt from the
              periodic access log of a request the daemon did not know: one
              admitted before a restart, or whose lease had expired)
  AGE         how long it has been held
  RENEWED     how long ago a periodic access-log entry renewed it last
              ("never" when none did)
  EXPIRES IN  how long until it is reclaimed unless renewed or released
              ("overdue" when the next sweep reclaims it)

Times are measured by the server's clock. At most --limit permits are shown
(at most 1000); a last line says so when the bulkhead holds more. Permits'
tokens are never shown.

-o json prints the same object as the JSON API's
GET /v1/bulkheads/NAME/holders; -o yaml the same in YAML.`,
		setup: func(fs *pflag.FlagSet) func(context.Context, *app, []string) error {
			limit := fs.Int("limit", admin.DefaultHolders, fmt.Sprintf("show at most this many permits, the oldest (1 to %d)", admin.MaxHolders))
			output := fs.StringP("output", "o", "table", "output format: table, json or yaml")
			return func(ctx context.Context, a *app, args []string) error {
				name, err := nameArg("holders", args)
				if err != nil {
					return err
				}
				if *limit < 1 || *limit > admin.MaxHolders {
					return usagef("--limit %d: must be within [1, %d]", *limit, admin.MaxHolders)
				}
				switch *output {
				case "table", "json", "yaml":
				default:
					return usagef("holders: -o %q: want table, json or yaml", *output)
				}
				c, err := a.client()
				if err != nil {
					return err
				}
				ctx, cancel := a.callCtx(ctx)
				defer cancel()
				resp, err := c.ListHolders(ctx, &adminv1.ListHoldersRequest{Name: name, Limit: int32(*limit)})
				if status.Code(err) == codes.Unimplemented {
					return &exitError{exitRefused, fmt.Sprintf("the admin API at %s cannot list holders: %s", a.g.addr, status.Convert(err).Message())}
				}
				if err != nil {
					return a.explain(err)
				}
				return writeHolders(a.stdout, admin.NewHoldersView(name, resp), *output)
			}
		},
	}
}

func writeHolders(w io.Writer, v admin.HoldersView, format string) error {
	if format != "table" {
		return writeEncoded(w, v, format)
	}
	if len(v.Holders) == 0 {
		_, err := fmt.Fprintf(w, "%s holds no permits\n", v.Bulkhead)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPRIORITY\tSOURCE\tAGE\tRENEWED\tEXPIRES IN")
	for _, h := range v.Holders {
		node := h.Node
		if node == "" {
			node = "-"
		}
		renewed := "never"
		if h.Renewed != nil {
			renewed = short(v.Time.Sub(*h.Renewed)) + " ago"
		}
		expires := "overdue"
		if left := h.Expires.Sub(v.Time); left > 0 {
			expires = short(left)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", node, h.Priority, h.Source, short(v.Time.Sub(h.Acquired)), renewed, expires)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := int64(len(v.Holders)); v.Total > n {
		_, err := fmt.Fprintf(w, "the %d oldest of %d permits (--limit)\n", n, v.Total)
		return err
	}
	return nil
}

// short formats d for a table: tenths of a second under 10s, whole
// seconds above.
func short(d time.Duration) string {
	d = max(d, 0)
	if d < 10*time.Second {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}
