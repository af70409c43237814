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
// It should equal the node.id that Envoy's access-log streams carry in
// their Identifier: the lease shows it as the permit's holder, and a node
// seen not to send periodic access-log entries gets the long lease for its
// permits (SilentNodes). Without it everything works the same, but permits
// name no holder until adopted.
const NodeHeader = "x-bulkhead-node"

// SilentNodes tells which Envoy nodes were seen not to send periodic
// access-log entries; *accesslog.SilentNodes is one.
type SilentNodes interface {
	Silent(node string) bool
}

// WithSilentNodes sets the nodes whose permits get the long lease instead
// of the heartbeat lease (default: none).
func WithSilentNodes(n SilentNodes) Option { return func(s *Server) { s.silent = n } }

type noSilentNodes struct{}

func (noSilentNodes) Silent(string) bool { return false }

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
