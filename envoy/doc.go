// Package envoy owns the Envoy bootstrap that puts an Envoy front proxy in
// front of Bulkhead: an ext_authz filter that takes a permit per request and
// a gRPC access logger that gives it back.
//
// The bootstrap is a text/template (front-proxy.yaml.tmpl, embedded) so that
// the demo (fixed ports, DemoParams) and the end-to-end tests (port 0
// everywhere) run exactly the configuration users copy. front-proxy.yaml is
// the template rendered with DemoParams; a test fails when it is stale, and
// `make envoy-config` (go run ./envoy/gen) regenerates it.
//
// The connection manager has two gRPC access loggers to the daemon: the
// release logger sends every entry but the periodic ones at once
// (buffer_size_bytes 0: a permit goes back as soon as its request ends), and
// the heartbeat logger sends only the periodic entries (access_log_options.
// access_log_flush_interval, the permits' heartbeat), batched with a flush
// interval of a quarter heartbeat interval: many entries per gRPC message,
// delivered well within a lease. Params.SingleAccessLog renders the older
// form, one unbuffered logger for both, for comparison.
//
// With Params.BulkheadTLS the bulkhead cluster gets an UpstreamTlsContext:
// ALPN h2, the daemon's CA, SNI and a subject-alt-name match (a DNS name, or
// the daemon's IP address when there is no SNI), and Envoy's client
// certificate for a daemon that requires mTLS (listen.grpc_tls). Without it
// the rendered bootstrap is unchanged.
//
// Render is a pure function and safe for concurrent use; Params values are
// plain data owned by the caller.
package envoy
