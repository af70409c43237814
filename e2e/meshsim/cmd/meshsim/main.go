// Command meshsim simulates thousands of Envoys in front of one Bulkhead
// daemon and measures the daemon (issue 28; docs/performance.md, "One
// daemon for a whole mesh"). It is a test tool, not shipped.
//
//	go run ./e2e/meshsim/cmd/meshsim [flags]            # the table and the plot
//	go run ./e2e/meshsim/cmd/meshsim capture -out DIR   # record a real Envoy's messages
//	go run ./e2e/meshsim/cmd/meshsim calibrate          # CPU per request: simulator vs real Envoy
//	go run ./e2e/meshsim/cmd/meshsim -ledger leases -replicas 2 -storm=false -tenants 0 -limited=false  # on Redis (meshsim doc)
package main

import (
	"os"

	"github.com/bulkhead-mesh/bulkhead/e2e/meshsim"
)

func main() { os.Exit(meshsim.Main(os.Args[1:], os.Stdout, os.Stderr)) }
