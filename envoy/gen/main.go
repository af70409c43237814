// Command gen writes envoy/front-proxy.yaml, the front-proxy template
// rendered with envoy.DemoParams. Run it from the module root:
//
//	go run ./envoy/gen            # or: make envoy-config
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/bulkhead-mesh/bulkhead/envoy"
)

func main() {
	out := flag.String("o", "envoy/front-proxy.yaml", "output file")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	b, err := envoy.Render(envoy.DemoParams())
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}
