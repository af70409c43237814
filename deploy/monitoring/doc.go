// Package monitoring reads Bulkhead's observability artifacts so tests can
// check them against real metrics: the Grafana dashboard
// (charts/bulkhead/dashboards/bulkhead.json) and the Prometheus alert rules
// (charts/bulkhead/rules/bulkhead.rules.yaml).
//
// DashboardQueries lists every PromQL query of the dashboard (panel targets
// and query variables) with the template variables substituted; Rules lists
// the rules of a rule file; DataQuery turns an alert expression into one
// that returns a sample for every series the alert looks at, whatever the
// threshold; MetricNames lists the bulkhead_* and envoy_* metric names an
// expression uses; EnvoyMetrics are the Envoy stats the artifacts rely on.
//
// It is test infrastructure shared by the unit tests in deploy/ and the e2e
// tests, not a stable API. Everything here is a pure function, safe for
// concurrent use.
package monitoring
