//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// Issue 6: mutual TLS between Envoy and the daemon. The daemon requires a
// client certificate signed by Envoy's CA; Envoy presents one, sends SNI and
// checks the daemon's certificate against its CA and name. Requests are
// admitted and released over it (ext_authz and the access-log stream);
// a Go gRPC client without a certificate, with one from another CA, or
// without TLS is refused. Then the daemon's certificate is rotated on disk:
// new connections get the new certificate from the same process, Envoy's
// existing connection keeps working, and a restarted Envoy connects anew.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	daemonCA, envoyCA := testkit.NewCA(t, "bulkhead CA"), testkit.NewCA(t, "envoy CA")
	srvCert, srvKey := daemonCA.Issue(t, "bulkhead", true)
	firstSerial := testkit.Serial(t, srvCert)
	envoyCert, envoyKey := envoyCA.Issue(t, "front-proxy", false)
	certFile, keyFile := testkit.WriteFile(t, dir, "tls.crt", srvCert), testkit.WriteFile(t, dir, "tls.key", srvKey)
	clientCAFile := testkit.WriteFile(t, dir, "envoy-ca.crt", envoyCA.PEM)
	daemonCAFile := testkit.WriteFile(t, dir, "bulkhead-ca.crt", daemonCA.PEM)
	envoyCertFile, envoyKeyFile := testkit.WriteFile(t, dir, "envoy.crt", envoyCert), testkit.WriteFile(t, dir, "envoy.key", envoyKey)

	const limit = 4
	fs := startFaultStack(t, faultSpec{
		listen: fmt.Sprintf("grpc_tls: {cert_file: %q, key_file: %q, client_ca_file: %q}", certFile, keyFile, clientCAFile),
		yaml: `
bulkheads:
  catalog: {max_concurrent: 4, max_queue: 32, max_wait: 3s}
`,
		envoy: func(p *envoy.Params) {
			p.ExtAuthzTimeout = 5 * time.Second
			p.BulkheadTLS = &envoy.UpstreamTLS{CAFile: daemonCAFile, ServerName: testkit.ServerName,
				CertFile: envoyCertFile, KeyFile: envoyKeyFile}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fs.up["catalog"].SetDelay(100 * time.Millisecond)

	// 1. Admitted (some after waiting: 12 requests, limit 4) and released.
	burst := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		codes := make([]int, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := fs.get(ctx, "/catalog", nil)
				codes[i] = r.status
			}()
		}
		wg.Wait()
		for i, c := range codes {
			if c != http.StatusOK {
				t.Fatalf("request %d through Envoy over mTLS: status %d (all: %v)", i, c, codes)
			}
		}
	}
	burst(3 * limit)
	fs.waitGauge("bulkhead_active_calls", "catalog", 0, 5*time.Second)
	m := fs.metrics()
	if got := m.Sum("bulkhead_admitted_total", map[string]string{"dependency": "catalog"}); got != 3*limit {
		t.Errorf("admitted %v, want %d", got, 3*limit)
	}
	if got := m.Sum("bulkhead_releases_total", map[string]string{"source": "access_log"}); got != 3*limit {
		t.Errorf("released by access log %v, want %d: the access-log stream does not work over mTLS", got, 3*limit)
	}

	// 2. Refused: no client certificate, another CA's, no TLS at all.
	strangerCert, strangerKey := testkit.NewCA(t, "stranger CA").Issue(t, "front-proxy", false)
	for _, c := range []struct {
		name  string
		creds credentials.TransportCredentials
	}{
		{"no client certificate", credentials.NewTLS(daemonCA.ClientTLS(t, nil, nil))},
		{"another CA's client certificate", credentials.NewTLS(daemonCA.ClientTLS(t, strangerCert, strangerKey))},
		{"plaintext", insecure.NewCredentials()},
	} {
		err := checkWith(ctx, t, fs.grpcAddr, c.creds)
		if code := status.Code(err); code != codes.Unavailable {
			t.Errorf("%s: Check = %v, want refused (Unavailable)", c.name, err)
		}
	}
	withCert := credentials.NewTLS(envoyCA.ClientTLS(t, nil, nil)) // trusts the wrong CA for the server
	if err := checkWith(ctx, t, fs.grpcAddr, withCert); err == nil {
		t.Error("a client that does not trust the daemon's CA completed a Check")
	}
	if err := healthWith(ctx, t, fs.grpcAddr, credentials.NewTLS(daemonCA.ClientTLS(t, envoyCert, envoyKey))); err != nil {
		t.Errorf("a Go client with Envoy's certificate: %v", err)
	}

	// 3. Rotate the daemon's certificate: same CA, new serial, renamed over.
	pid := fs.daemon.cmd.Process.Pid
	newCert, newKey := daemonCA.Issue(t, "bulkhead", true)
	newSerial := testkit.Serial(t, newCert)
	testkit.Replace(t, keyFile, newKey)
	testkit.Replace(t, certFile, newCert)
	dialCfg := daemonCA.ClientTLS(t, envoyCert, envoyKey)
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	poll(t, pctx, "the new certificate served to a new connection", func() bool {
		got, err := testkit.ServedSerial(fs.grpcAddr, dialCfg)
		return err == nil && got.Cmp(newSerial) == 0
	})
	if got, err := testkit.ServedSerial(fs.grpcAddr, dialCfg); err != nil || got.Cmp(firstSerial) == 0 {
		t.Fatalf("after rotation: serial %v, %v", got, err)
	}
	if fs.daemon.cmd.Process.Pid != pid {
		t.Fatal("the daemon was restarted")
	}
	if got := fs.counter("bulkhead_grpc_tls_reloads_total", map[string]string{"result": "success"}); got < 2 {
		t.Errorf("TLS reloads %v, want at least 2 (start and rotation)", got)
	}
	// Envoy's connection, made with the old certificate, keeps serving.
	burst(limit)
	// A new Envoy connects anew and verifies the new certificate.
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if err := fs.envoy.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	client.CloseIdleConnections()
	fs.restartEnvoy(ctx)
	burst(2 * limit)
	// A response can reach the client before its access-log entry reaches
	// the daemon: wait for the releases before counting them.
	fs.waitGauge("bulkhead_active_calls", "catalog", 0, 5*time.Second)
	if got := fs.counter("bulkhead_releases_total", map[string]string{"source": "access_log"}); got != 6*limit {
		t.Errorf("released by access log %v, want %d", got, 6*limit)
	}
	t.Logf("certificate serial %x rotated to %x without a restart; Envoy reconnected over mTLS", firstSerial, newSerial)
}

// checkWith sends one Check (for an unknown bulkhead: no permit) over a new
// connection with creds.
func checkWith(ctx context.Context, t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = authv3.NewAuthorizationClient(conn).Check(cctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: map[string]string{"bulkhead": "nope"}}})
	return err
}

// healthWith calls gRPC health over a new connection with creds.
func healthWith(ctx context.Context, t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
	return err
}
