package authz

import (
	"context"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/bulkhead-mesh/bulkhead/pkg/accesslog"
)

// NodeHeader is the gRPC metadata key, on the Check RPC itself (not a
// request header of the client, which a client could forge), naming the
// Envoy node that asks. Envoy sends it when its ext_authz grpc_service has
//
//	initial_metadata: [{key: x-bulkhead-node, value: "<node.id>"}]
//
// It must equal the node.id that Envoy's access-log streams carry in their
// Identifier: that is how a permit is tied to the streams whose end means
// the permit's holder is gone.
const NodeHeader = "x-bulkhead-node"

// ExtLeaseTTL is the context_extensions key of a route's own lease TTL, a Go
// duration ("90s"); it is capped at Policy.MaxRouteLeaseTTL.
const ExtLeaseTTL = "lease_ttl"

// maxDurationText bounds the lease_ttl text that is parsed.
const maxDurationText = 32

// Nodes is told which Envoy node each Check came from, as a sign that the
// node is alive; *accesslog.Nodes is one.
type Nodes interface {
	Heard(node string)
}

// WithNodes sets the node tracker told of every Check's node (default: none).
func WithNodes(n Nodes) Option { return func(s *Server) { s.nodes = n } }

// nodeOf returns the node named by the Check's NodeHeader metadata, or ""
// when it is missing, given more than once, or not a valid node id
// (accesslog.ValidNodeID, at most accesslog.MaxNodeIDLen bytes): such
// permits are not reclaimed by node. bad reports a value that was present
// but ignored.
func nodeOf(ctx context.Context) (node string, bad bool) {
	v := metadata.ValueFromIncomingContext(ctx, NodeHeader) // copies one value, not the whole MD
	switch {
	case len(v) == 0:
		return "", false
	case len(v) != 1 || !accesslog.ValidNodeID(v[0]):
		return "", true
	}
	return v[0], false
}

// leaseTTL is the lease of a permit of bulkhead key: the route's
// context_extensions lease_ttl when it is a positive duration (cut to
// MaxRouteLeaseTTL), else the bulkhead's. A value that is not a positive
// duration, or above the cap, is counted.
func (s *Server) leaseTTL(pol *Policy, key string, route optional) time.Duration {
	if !route.ok {
		return pol.leaseTTL(key)
	}
	v := route.v
	d, err := time.Duration(0), error(nil)
	if len(v) <= maxDurationText {
		d, err = time.ParseDuration(v)
	}
	switch {
	case len(v) > maxDurationText || err != nil || d <= 0 || pol.MaxRouteLeaseTTL <= 0:
		s.rec.InvalidLeaseTTL(key)
		return pol.leaseTTL(key)
	case d > pol.MaxRouteLeaseTTL:
		s.rec.InvalidLeaseTTL(key)
		return pol.MaxRouteLeaseTTL
	}
	return d
}
