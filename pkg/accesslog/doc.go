// Package accesslog is Bulkhead's Envoy access-log service
// (envoy.service.accesslog.v3.AccessLogService). Envoy streams an
// HTTPAccessLogEntry when each request ends; the permit token the ext_authz
// answer put in dynamic metadata comes back in
// common_properties.metadata.filter_metadata["envoy.filters.http.ext_authz"]
// and the permit is released through the ledger (exactly once). The ledger
// is the admission contract (admission.Ledger): this process's, or the
// Redis ledger many replicas share; the server does not know which, and
// takes each answer (one permit.Result) through a callback (answer.go),
// which a shared ledger may call later, from its batcher.
//
// Only DownstreamEnd entries release: periodic entries renew (see below),
// upstream entries of the same request are ignored. Entries without a
// token (requests denied by the bulkhead, or not checked), unknown and
// duplicate tokens are counted no-ops. The response code and flags of released entries are counted as
// success, failure (5xx, or no response because of an upstream or local
// reset or timeout) or client abort (the client went away first). Each
// release also records its lag: the hold time less the upstream's span in
// the entry (Recorder.ReleaseLag).
//
// Connections are served the same way: the TCP proxy's access log streams a
// TCPAccessLogEntry when a connection closes (TcpConnectionEnd, which
// releases) and, with access_log_flush_interval on the TCP proxy, once an
// interval while it is open (TcpPeriodic, which renews or adopts). The
// permit is under the network filter's namespace,
// "envoy.filters.network.ext_authz" (permit.MetadataNamespaceOf). A closed
// connection succeeded unless its flags report upstream trouble.
//
// Register serves the Server to Envoy without decoding whole messages: the
// gRPC server, built with wire.ServerCodec, hands the stream the encoding,
// which message.go walks for the identifier and, per entry, the fields
// above, with a full decode's semantics. StreamAccessLogs, the decoded
// path, runs the same loop.
//
// # Heartbeat leases
//
// The stream is at most once, so every permit is a lease, and Envoy keeps it
// alive (WithHeartbeat; the rules are permit.Heartbeat's): with
// access_log_flush_interval set on its HTTP
// connection manager, Envoy logs every request in flight once an interval
// (DownstreamPeriodic), carrying the same ext_authz metadata as the end
// entry. Each such entry renews its permit's lease to Heartbeat.TTL; a
// permit neither renewed nor ended is reclaimed by the ledger's sweep. So a
// dead Envoy's permits come back within one TTL of their last renewal,
// whatever its node id, with or without x-bulkhead-node, and a request of
// any length keeps its permit while its Envoy lives.
//
// A periodic entry whose token the ledger does not hold is adopted by the
// ledger (admission.Ledger.Renew): the request was admitted by an earlier
// process (the daemon restarted) or its lease expired while it ran. Its
// bulkhead (the metadata's "bulkhead" key) counts it in use at once (never
// queued or rejected, it runs already) and its end entry releases it.
// Unknown tokens are adopted only within the adoption window
// (permit.Heartbeat.AdoptFor); a request's last periodic entry, batched,
// can come after its end entry, and the ledger answers it Late, never an
// adoption (permit.EndedTokens, and the Redis ledger's ended set).
//
// Misconfiguration is loud (Recorder.HeartbeatProblem, SilentNodes): an end
// entry for a permit already reclaimed (permit.EndedAfterExpiry), or a
// request that held its permit for 2.5 intervals and ended without a
// renewal (permit.NoPeriodic), names the stream's node (its Identifier) as
// one that does not heartbeat, unless that node is heard from: a periodic
// entry came on the same stream, or from the same node on any stream while
// the permit was held (within the last TTL for one already reclaimed). The
// shipped Envoy config sends periodic entries on a logger and streams of
// their own, batched, so the node, not the stream, is what heartbeats. It is logged once, and its later Checks that carry
// x-bulkhead-node get the long lease (permit.SilentNodes, read by the Check
// server) until it sends a periodic entry again.
//
// An entry the ledger could not serve because it cannot reach its store
// (permit.Unavailable) ends its stream after its message, so that Envoy's
// next entries renew their leases at a replica that can.
//
// Server is safe for concurrent use. Server handles any
// number of streams concurrently; it starts no goroutine.
package accesslog
