// Command inprocess shows Bulkhead's in-process bulkheads (pkg/isolation)
// in a small Go service, with no Envoy and no sidecar:
//
//   - the service's own routes are guarded by httpbulkhead.Handler (one
//     bulkhead per route, priority from x-bulkhead-priority);
//   - its calls to auth and orders go through httpbulkhead.Transport
//     (semaphore isolation, the transport's connection limits matched);
//   - its calls to catalog run on an isolation.Pool (pool isolation) with a
//     call timeout and a fallback that serves a cached product;
//   - every bulkhead is exported through the sidecar's collectors
//     (pkg/metrics) on /metrics.
//
// It runs two phases against three local upstreams: all healthy, then
// catalog slow. /order keeps its latency while catalog hangs; /product
// degrades to the cached answer instead of piling up. Then it prints the
// bulkhead metrics and exits.
//
//	go run ./examples/inprocess [-phase 1s]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"
)

func main() {
	phase := flag.Duration("phase", time.Second, "length of each load phase")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Stdout, *phase)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "inprocess:", err)
		os.Exit(1)
	}
}
