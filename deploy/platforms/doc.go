// Package platforms holds no code: its tests check the chart and the
// dashboard against the platforms users run them on, with those platforms'
// own types and servers, in a Go module of its own (deploy/platforms/go.mod)
// so that their heavy dependencies never reach the daemon's go.mod:
//
//   - Grafana: charts/bulkhead/dashboards/bulkhead.json decodes strictly
//     with grafana-foundation-sdk's dashboard, panel and Prometheus query
//     types (no unknown field, no required field missing, no wrong type),
//     and every problem names its panel or variable.
//   - Istio: every Istio object the chart renders (EnvoyFilter, Telemetry,
//     AuthorizationPolicy), the mesh config it renders for istiod, and every
//     YAML snippet of docs/istio.md decode strictly with istio.io/client-go's
//     types and istio.io/api's messages; the providers the objects name are
//     in the mesh config.
//   - Kubernetes: etcd and kube-apiserver (built from their Go modules by
//     `make kube-server`, pinned by kubeserver/go.mod, a module of its own)
//     run on loopback with a CA made for the test; the CRDs of the custom
//     kinds the chart renders are installed from the modules that publish
//     them; the chart is installed with helm (default, Redis ledger and
//     both Istio access-log modes' values), every object read back and compared with what helm
//     sent, a second replica of the memory ledger's release refused by the
//     chart's ValidatingAdmissionPolicy (kubectl scale and an edit),
//     upgraded with a new limit and rolled back (the ConfigMap as
//     the server stored it passing `bulkhead --check-config`), and
//     uninstalled, leaving nothing; and a release of the previous chart
//     version (testdata/bulkhead-0.1.0.tgz) upgraded to this one with its
//     user's values. Only with BULKHEAD_REQUIRE_KUBE=1.
//
// The chart is rendered with a real helm (pinned, `make helm`), found in
// $HELM_BIN, .bin/helm-* or PATH; without it those tests are skipped unless
// BULKHEAD_REQUIRE_HELM=1 (as in `make test`).
package platforms
