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
// reset or timeout) or client abort (the client went away first).
//
// Each Envoy worker thread opens its own stream; Server handles any number
// concurrently and is safe for concurrent use.
package accesslog
