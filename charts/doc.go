// Package charts holds no code: its tests check the Helm chart in
// charts/bulkhead with a real helm (pinned, installed by `make helm`):
//
//   - `helm lint --strict` and `helm template` over every values file in
//     charts/bulkhead/ci;
//   - every rendered manifest decodes strictly (unknown or duplicate fields
//     are errors) into its Kubernetes API type, prometheus-operator type or
//     Istio API message;
//   - the rendered daemon configuration is accepted by pkg/config, the
//     rendered Envoy snippet by a real Envoy (--mode validate), and the
//     Istio EnvoyFilter patches decode into Envoy's API types;
//   - bad values files are refused by values.schema.json (or by the
//     templates) with a message naming the problem.
//
// The tests find helm in $HELM_BIN, .bin/helm-* (built by `make helm`) or
// PATH, and skip without it unless BULKHEAD_REQUIRE_HELM=1 (as in
// `make test`).
package charts
