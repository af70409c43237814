package authz

import (
	"context"

	"google.golang.org/grpc/metadata"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
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

// Nodes is told which Envoy node each Check came from, as a sign that the
// node is alive; *accesslog.Nodes is one.
type Nodes interface {
	Heard(node string)
}

// WithNodes sets the node tracker told of every Check's node (default: none).
func WithNodes(n Nodes) Option { return func(s *Server) { s.nodes = n } }

// nodeOf returns the node named by the Check's NodeHeader metadata, or ""
// when it is missing, given more than once, or not a valid node id
// (permit.ValidNodeID, at most permit.MaxNodeIDLen bytes): such
// permits are not reclaimed by node. bad reports a value that was present
// but ignored.
func nodeOf(ctx context.Context) (node string, bad bool) {
	v := metadata.ValueFromIncomingContext(ctx, NodeHeader) // copies one value, not the whole MD
	switch {
	case len(v) == 0:
		return "", false
	case len(v) != 1 || !permit.ValidNodeID(v[0]):
		return "", true
	}
	return v[0], false
}
