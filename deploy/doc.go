// Package deploy holds no code: its tests check the deployment artifacts
// that are not Go, against the Go code they describe.
//
//   - The Grafana dashboard (charts/bulkhead/dashboards/bulkhead.json) and
//     the alert rules (charts/bulkhead/rules/bulkhead.rules.yaml) use only
//     metric names that pkg/metrics exports, and cover what they must.
//   - docker-compose.yaml loads with the compose-spec loader and every file
//     it mounts or builds from exists; the Envoy config it mounts is the
//     one envoy.Render produces for it.
//   - The Dockerfile builds a static, non-root image of cmd/bulkhead whose
//     --version shows the version and revision passed as build arguments;
//     .goreleaser.yaml builds the release archives with the same flags and
//     ldflags.
//   - The values table of charts/bulkhead/README.md is the one generated
//     from values.yaml's comments (-update rewrites it: make chart-readme).
//
// Subpackage monitoring reads the dashboard and the rules for these tests
// and for the e2e test that runs every query against a real Prometheus.
package deploy
