package monitoring

// EnvoyMetrics are the Envoy stats the dashboard and the alert rules use,
// as Envoy 1.40's admin /stats/prometheus names them. They are Envoy's, not
// the daemon's, so pkg/metrics cannot vouch for them; this list can, as far
// as a unit test goes, and the e2e observability test checks each against a
// real Envoy scraped by a real Prometheus.
//
// What they count (read off a real Envoy 1.40, the front proxy of
// envoy/front-proxy.yaml):
//   - envoy_http_ext_authz_{ok,denied,error,failure_mode_allowed}: the
//     ext_authz filter's decisions, labelled envoy_http_conn_manager_prefix
//     (the HTTP connection manager's stat_prefix). error counts every check
//     without a decision: connection refused, a gRPC error, or a Check that
//     timed out (there is no separate timeout stat); with failure_mode_allow
//     the same checks also count as failure_mode_allowed. The same names
//     exist per upstream cluster (envoy_cluster_ext_authz_*, created on
//     first use).
//   - envoy_cluster_upstream_rq_timeout{envoy_cluster_name="bulkhead"}: Check
//     RPCs that hit the ext_authz timeout.
//   - envoy_access_logs_grpc_access_log_{logs_written,logs_dropped,
//     grpc_entries_flushed,grpc_entries_flush_failed}: the gRPC access
//     loggers (one set for all of them, unlabelled); logs_dropped counts
//     entries not sent because the stream to the collector was over its
//     buffer limit.
var EnvoyMetrics = []string{
	"envoy_http_ext_authz_ok",
	"envoy_http_ext_authz_denied",
	"envoy_http_ext_authz_error",
	"envoy_http_ext_authz_failure_mode_allowed",
	"envoy_cluster_upstream_rq_timeout",
	"envoy_access_logs_grpc_access_log_logs_written",
	"envoy_access_logs_grpc_access_log_logs_dropped",
	"envoy_access_logs_grpc_access_log_grpc_entries_flush_failed",
}
