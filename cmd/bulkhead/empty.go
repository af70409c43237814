package main

import (
	"fmt"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
)

// noBulkheads returns, for a configuration without bulkheads, what would
// happen to every request: each is then handled by authz.unknown_bulkhead
// (never "default", which needs a bulkhead). path is the --config given,
// "" for none. It returns "" when cfg has bulkheads.
func noBulkheads(cfg *config.Config, path string) string {
	if len(cfg.Bulkheads) > 0 {
		return ""
	}
	where := "no --config given and no bulkheads configured"
	if path != "" {
		where = fmt.Sprintf("%s configures no bulkheads", path)
	}
	var what string
	switch p := cfg.Authz.Unmatched; p {
	case authz.Allow:
		what = "allow: each is admitted without a limit, so nothing is bounded"
	case authz.Deny:
		what = fmt.Sprintf("deny: each is rejected with HTTP %d, reason unknown_bulkhead", cfg.Authz.DenyStatus)
	default:
		what = p.String()
	}
	return fmt.Sprintf("%s: every request would be handled by authz.unknown_bulkhead, which is %s", where, what)
}
