package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// helpHead and helpTail are the parts of `bulkhead --help` around the
// flag list.
const helpHead = `bulkhead enforces concurrency bulkheads for an Envoy mesh, as Envoy's
ext_authz and gRPC access-log service.

Usage:
  bulkhead --config FILE [flags]
  bulkhead --config FILE --check-config

Flags:
`

const helpTail = `
Environment:
  BULKHEAD_<PATH>       every setting outside bulkheads, its dotted path in
                        capitals with _ for ., e.g. BULKHEAD_LISTEN_GRPC=0.0.0.0:9001,
                        BULKHEAD_AUTHZ_DENY_STATUS=429. Precedence: flag, then
                        environment, then file, then default.
  BULKHEAD_ADMIN_TOKEN  bearer token of the admin API (instead of admin.token_file)

Configuration:
  A complete, commented example with every setting and its default:
  pkg/config/testdata/example.yaml in the source tree.
  A file that changes while the daemon runs is reloaded; a bad reload keeps
  the last good configuration.

Exit codes:
  0  clean shutdown (SIGTERM or SIGINT), --check-config passed, --help, --version
  1  serving failed, or --check-config found no bulkheads (every request would
     then be handled by authz.unknown_bulkhead)
  2  usage error, or the configuration was refused
`

// printHelp writes the help of `bulkhead --help` to w.
func printHelp(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprint(w, helpHead)
	fmt.Fprint(w, strings.TrimRight(fs.FlagUsages(), "\n")+"\n")
	fmt.Fprint(w, helpTail)
}
