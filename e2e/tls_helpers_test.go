//go:build e2e

package e2e

import "github.com/bulkhead-mesh/bulkhead/pkg/testkit"

// daemonServerName is the DNS name in the daemon's test certificates, sent
// by Envoy as SNI and checked by it against the certificate.
const daemonServerName = testkit.ServerName
