// Package platforms holds no code: its tests check the chart and the
// dashboard against the platforms users run them on, with those platforms'
// own types, in a Go module of its own (deploy/platforms/go.mod) so that
// their heavy dependencies never reach the daemon's go.mod:
//
//   - Grafana: charts/bulkhead/dashboards/bulkhead.json decodes strictly
//     with grafana-foundation-sdk's dashboard, panel and Prometheus query
//     types (no unknown field, no required field missing, no wrong type),
//     and every problem names its panel or variable.
package platforms
