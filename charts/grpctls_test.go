package charts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3" // the clusters' protocol options
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc/envoyproctest"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// TestGRPCListenerTLS: config.listen and grpcTLS.secret reach the daemon's
// listen section (the addresses stay the chart's); the Deployment mounts
// the Secret's keys where the grpc_tls files point; the snippet's bulkhead
// cluster carries the UpstreamTlsContext that envoy.Render makes for the
// same CA, name and client certificate, and a real Envoy accepts that
// cluster with real files.
func TestGRPCListenerTLS(t *testing.T) {
	d := newDecoder(t)
	dir := t.TempDir()
	ca := testkit.NewCA(t, "bulkhead-test-ca")
	cert, key := ca.Issue(t, "envoy", false)
	files := map[string][]byte{"ca.pem": ca.PEM, "envoy.crt": cert, "envoy.key": key}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "envoy.crt"), filepath.Join(dir, "envoy.key")
	ms := render(t, filepath.Join(chartDir(t), "ci", "minimal-values.yaml"), "--set",
		"config.listen.grpc_max_connection_age=30m,config.listen.grpc_max_concurrent_streams=5000,"+
			"grpcTLS.secret.name=bulkhead-grpc,grpcTLS.secret.clientCAKey=ca.crt,"+
			"envoy.tls.caFile="+caFile+",envoy.tls.certFile="+certFile+",envoy.tls.keyFile="+keyFile)
	cfg := daemonConfig(t, d, ms)
	l := cfg.Listen
	if l.GRPC != "0.0.0.0:9001" || l.GRPCMaxConnectionAge != 30*time.Minute || l.GRPCMaxConcurrentStreams != 5000 {
		t.Errorf("listen %+v: want the chart's address, max_connection_age 30m, max_concurrent_streams 5000", l)
	}
	spec := decodeAs[*appsv1.Deployment](t, d, find(ms, "Deployment", "")[0]).Spec.Template.Spec
	for _, f := range []struct{ path, key string }{{l.GRPCTLS.CertFile, "tls.crt"}, {l.GRPCTLS.KeyFile, "tls.key"}, {l.GRPCTLS.ClientCAFile, "ca.crt"}} {
		if sec, k := mountedSecret(spec, f.path); sec != "bulkhead-grpc" || k != f.key {
			t.Errorf("listen.grpc_tls file %q served by %q/%q, want bulkhead-grpc/%s", f.path, sec, k, f.key)
		}
	}

	s := renderedSnippet(t, d, ms)
	var got clusterv3.Cluster
	unmarshalProto(t, s.Clusters[0], &got)
	var gotTLS tlsv3.UpstreamTlsContext
	if err := got.GetTransportSocket().GetTypedConfig().UnmarshalTo(&gotTLS); err != nil {
		t.Fatalf("snippet cluster's transport socket: %v", err)
	}
	host := "rel-bulkhead.mesh.svc.cluster.local"
	raw, err := envoy.Render(envoy.Params{Bulkhead: envoy.Endpoint{Host: host, Port: 9001}, Routes: envoy.DemoRoutes(envoy.Endpoint{Host: "127.0.0.1", Port: 8080}, envoy.Endpoint{Host: "127.0.0.1", Port: 8081}, envoy.Endpoint{Host: "127.0.0.1", Port: 8082}),
		BulkheadTLS: &envoy.UpstreamTLS{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}})
	if err != nil {
		t.Fatal(err)
	}
	var boot struct {
		StaticResources struct {
			Clusters []map[string]any `json:"clusters"`
		} `json:"static_resources"`
	}
	if err := yaml.Unmarshal(raw, &boot); err != nil {
		t.Fatal(err)
	}
	var wantTLS tlsv3.UpstreamTlsContext
	for _, c := range boot.StaticResources.Clusters {
		if c["name"] == "bulkhead" {
			var want clusterv3.Cluster
			unmarshalProto(t, c, &want)
			if err := want.GetTransportSocket().GetTypedConfig().UnmarshalTo(&wantTLS); err != nil {
				t.Fatal(err)
			}
		}
	}
	if wantTLS.GetSni() != host {
		t.Fatalf("envoy.Render's bulkhead cluster: SNI %q, want %q", wantTLS.GetSni(), host)
	}
	if !proto.Equal(&gotTLS, &wantTLS) {
		t.Errorf("snippet's UpstreamTlsContext differs from envoy.Render's:\nsnippet: %s\nrender:  %s", prototext.Format(&gotTLS), prototext.Format(&wantTLS))
	}

	envoyValidate(t, envoyproctest.Binary(t), map[string]any{
		"admin":            map[string]any{"address": sockAddr("127.0.0.1", 0)},
		"static_resources": map[string]any{"clusters": s.Clusters},
	})
}

// The chart refuses a snippet that would not match the daemon's listener.
func TestGRPCListenerTLSRefused(t *testing.T) {
	for _, tc := range []struct{ set, refused string }{
		{"grpcTLS.secret.name=g", "envoy.tls.caFile is empty"},
		{"envoy.tls.caFile=/ca.pem", "grpcTLS.secret.name is empty"},
		{"grpcTLS.secret.name=g,grpcTLS.secret.clientCAKey=ca.crt,envoy.tls.caFile=/ca.pem", "requires a client certificate"},
		{"grpcTLS.secret.name=g,envoy.tls.caFile=/ca.pem,envoy.tls.certFile=/c.pem", "set both"},
		{"config.listen.grpc=0.0.0.0:1", "grpc"},
		{"config.listen.grpc_max_concurrent_streams=10", "grpc_max_concurrent_streams"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			out, err := helm(t, "template", "rel", chartDir(t), "--namespace", "mesh", "--kube-version", kubeVersion,
				"--set", "bulkheads.catalog.max_concurrent=10", "--set", tc.set)
			if err == nil || !strings.Contains(out, tc.refused) {
				t.Errorf("helm template: err %v, want a refusal with %q:\n%s", err, tc.refused, out)
			}
		})
	}
	// Without the snippet the Envoys are the user's: the daemon may listen
	// over TLS alone.
	ms := render(t, "", "--set", "bulkheads.catalog.max_concurrent=10,grpcTLS.secret.name=g,envoy.snippet.enabled=false")
	if tls := daemonConfig(t, newDecoder(t), ms).Listen.GRPCTLS; tls.CertFile == "" || tls.ClientCAFile != "" {
		t.Errorf("listen.grpc_tls %+v, want TLS without a client CA", tls)
	}
}

// TestAdminTLS: admin.tlsSecret (with admin.enabled) backs the daemon's
// admin.tls files; without admin.enabled the chart refuses it.
func TestAdminTLS(t *testing.T) {
	d := newDecoder(t)
	ms := render(t, "", "--set", "bulkheads.catalog.max_concurrent=10,admin.enabled=true,admin.tokenSecret.name=admin-token,"+
		"admin.tlsSecret.name=admin-tls,admin.tlsSecret.clientCAKey=ca.crt")
	tls := daemonConfig(t, d, ms).Admin.TLS
	spec := decodeAs[*appsv1.Deployment](t, d, find(ms, "Deployment", "")[0]).Spec.Template.Spec
	for _, f := range []struct{ path, key string }{{tls.CertFile, "tls.crt"}, {tls.KeyFile, "tls.key"}, {tls.ClientCAFile, "ca.crt"}} {
		if sec, k := mountedSecret(spec, f.path); sec != "admin-tls" || k != f.key {
			t.Errorf("admin.tls file %q served by %q/%q, want admin-tls/%s", f.path, sec, k, f.key)
		}
	}
	out, err := helm(t, "template", "rel", chartDir(t), "--namespace", "mesh", "--kube-version", kubeVersion,
		"--set", "bulkheads.catalog.max_concurrent=10,admin.tlsSecret.name=admin-tls")
	if err == nil || !strings.Contains(out, "admin.tlsSecret.name is set but admin.enabled is false") {
		t.Errorf("helm template: err %v, want admin.tlsSecret without admin.enabled refused:\n%s", err, out)
	}
}
