package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

func suggestCmd() *command {
	return &command{
		name:    "suggest",
		usage:   "suggest [NAME] [--window D] [--headroom F] [--min-requests N]",
		summary: "recommend max_concurrent and max_queue from observed traffic",
		help: `For one bulkhead, or every bulkhead, from what Bulkhead observed over the
window (its last 10 minutes at most): the throughput (requests ended per
second, over the seconds that saw any) times the mean permit hold time is
what Little's law says the traffic needs; the peak permits in use and the
p99 of the permits in use (sampled 4 times a second) are what it took.
max_concurrent is Little's figure plus the headroom, but at least the p99
in use; max_queue is what
that limit serves within the bulkhead's max_wait (kept when max_wait is 0).
A bulkhead with fewer than --min-requests requests in the window gets no
recommendation. The evidence is printed beside the figures; nothing is
changed (use bulkheadctl set, or the config file).`,
		setup: func(fs *pflag.FlagSet) func(context.Context, *app, []string) error {
			window := fs.Duration("window", sizing.DefaultWindow, "how far back to look, a `duration` in [1s, 10m]")
			headroom := fs.Float64("headroom", sizing.DefaultHeadroom, "`fraction` added on top of what the traffic needs")
			minRequests := fs.Int32("min-requests", sizing.DefaultMinRequests, "fewer requests (`N`) in the window: no recommendation")
			return func(ctx context.Context, a *app, args []string) error {
				var name string
				switch len(args) {
				case 0:
				case 1:
					name = args[0]
				default:
					return usagef("suggest: want at most one bulkhead NAME, got %d arguments", len(args))
				}
				c, err := a.client()
				if err != nil {
					return err
				}
				ctx, cancel := a.callCtx(ctx)
				defer cancel()
				resp, err := c.SuggestBulkheads(ctx, &adminv1.SuggestBulkheadsRequest{Name: name,
					Window: durationpb.New(*window), Headroom: *headroom, MinRequests: *minRequests})
				if err != nil {
					return a.explain(err)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "BULKHEAD\tMAX_CONCURRENT\tMAX_QUEUE\tREQUESTS\tTHROUGHPUT/S\tMEAN HOLD\tLITTLE\tPEAK\tP99 IN USE")
				for _, s := range resp.GetSuggestions() {
					v := admin.NewSuggestionView(s)
					if v.Refused != "" {
						fmt.Fprintf(tw, "%s\t%d (kept)\t%d (kept)\t%d\t-\t-\t-\t-\t-\t(%s)\n", v.Name, v.CurrentMaxConcurrent, v.CurrentMaxQueue, v.Requests, v.Refused)
						continue
					}
					fmt.Fprintf(tw, "%s\t%d (now %d)\t%d (now %d)\t%d\t%.1f\t%s\t%.1f\t%d\t%d\n", v.Name, v.MaxConcurrent, v.CurrentMaxConcurrent,
						v.MaxQueue, v.CurrentMaxQueue, v.Requests, v.Throughput, v.MeanHold, v.Little, v.Peak, v.P99InUse)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				// The headroom the daemon used (0 asked is its default: the API
				// cannot tell 0 from unset).
				used := *headroom
				for _, sg := range resp.GetSuggestions() {
					if sg.GetRefused() == "" {
						used = sg.GetHeadroom()
						break
					}
				}
				fmt.Fprintf(a.stdout, "window %s, headroom %v; max_concurrent = ceil(max(LITTLE x (1 + headroom), P99 IN USE)); max_queue = max_wait x max_concurrent / MEAN HOLD\n",
					*window, used)
				return nil
			}
		},
	}
}
