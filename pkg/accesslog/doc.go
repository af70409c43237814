// Package accesslog is Bulkhead's Envoy access-log service
// (envoy.service.accesslog.v3.AccessLogService). Envoy streams an
// HTTPAccessLogEntry when each request ends; the permit token the ext_authz
// answer put in dynamic metadata comes back in
// common_properties.metadata.filter_metadata["envoy.filters.http.ext_authz"]
// and the permit is released through the ledger (exactly once).
//
// Only DownstreamEnd entries release: periodic or upstream entries of the
// same request must not. Entries without a token (requests denied by the
// bulkhead, or not checked), unknown and duplicate tokens are counted
// no-ops. The response code and flags of released entries are counted as
// success, failure (5xx, or no response because of an upstream or local
// reset or timeout) or client abort (the client went away first). Each
// release also records its lag: the hold time less the upstream's span in
// the entry (Recorder.ReleaseLag).
//
// Register serves the Server to Envoy without decoding whole messages: the
// gRPC server, built with wire.ServerCodec, hands the stream the encoding,
// which message.go walks for the identifier and, per entry, the fields
// above, with a full decode's semantics. StreamAccessLogs, the decoded
// path, runs the same loop.
//
// # Node-lost reclamation
//
// The stream is at most once, so every permit is a lease. Nodes (this
// package's tracker) ends the permits of an Envoy that died well before
// their leases, from what the two RPCs carry:
//
//   - A permit is attributed to a node by the Check that took it: Envoy's
//     ext_authz grpc_service sends static initial_metadata
//     x-bulkhead-node: <node.id> (see authz.NodeHeader) and the ledger
//     records it as the lease's Node. The CheckRequest itself names no node;
//     the gRPC peer address would be a fallback, but Envoys share it on
//     loopback, behind NAT or behind a proxy, so it is not used: a Check
//     without the metadata, or with an invalid id (permit.ValidNodeID), gives a
//     permit that only its lease reclaims.
//   - A node is alive while it has an access-log stream: the first message
//     of each stream carries Identifier{node{id}, log_name}, and each Envoy
//     worker opens its own stream. Streams are counted per node id.
//   - When a node's last stream closes (Envoy died: the kernel closes its
//     sockets; or the stream broke), its grace period starts. A new stream
//     of the node, or a Check from it (Nodes.Heard), keeps it alive. When
//     the grace period passes with neither, the node is lost: it is
//     forgotten and every lease it holds is released with source node_lost.
//
// What this cannot tell (each case falls back to the lease, never to an
// early release):
//
//   - Envoy opens a stream lazily, with its first log entry. A node that
//     never had a stream is not tracked.
//   - A node restarted under the same id within the grace period is taken
//     for the same process: the dead process's permits end by lease. Make
//     node ids unique per process where that matters (both the bootstrap's
//     node.id and the metadata value can come from the environment:
//     --service-node and %ENVIRONMENT(...)% in initial_metadata).
//   - Integrations that cannot set initial_metadata (Istio's
//     envoyExtAuthzGrpc provider) give permits without a node.
//
// The risk runs the other way only for a live node that loses every stream
// and then sends no Check and completes no request for the whole grace
// period (a network partition, or streams cut by the service while the node
// holds only long requests): its permits are released while its requests
// still run, and the limit can be exceeded until they end. Keep node_grace
// above such quiet spells, or set it to 0.
//
// Nodes costs one goroutine (Run) and one timer for all nodes, armed for
// the earliest end of a grace period; a Check costs a lock-free map lookup.
// Tracked nodes are capped (WithMaxNodes); ids are bounded (permit.MaxNodeIDLen).
//
// Server and Nodes are safe for concurrent use. Server handles any number of
// streams concurrently; Nodes.Run is meant to run in one goroutine, owned by
// the caller and stopped by its context.
package accesslog
