package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// pkiFiles are a server key pair and a client CA bundle on disk.
type pkiFiles struct {
	dir                 string
	cert, key, clientCA string
	serverCA, envoyCA   *testkit.CA
	envoyCert, envoyKey []byte // a client certificate signed by envoyCA
}

func writeServerPKI(t *testing.T) *pkiFiles {
	t.Helper()
	p := &pkiFiles{dir: t.TempDir(), serverCA: testkit.NewCA(t, "bulkhead CA"), envoyCA: testkit.NewCA(t, "envoy CA")}
	cert, key := p.serverCA.Issue(t, "bulkhead", true)
	p.cert = testkit.WriteFile(t, p.dir, "tls.crt", cert)
	p.key = testkit.WriteFile(t, p.dir, "tls.key", key)
	p.clientCA = testkit.WriteFile(t, p.dir, "client-ca.crt", p.envoyCA.PEM)
	p.envoyCert, p.envoyKey = p.envoyCA.Issue(t, "front-proxy", false)
	return p
}

func (p *pkiFiles) yaml() string {
	return fmt.Sprintf(`listen:
  grpc: "127.0.0.1:0"
  http: "127.0.0.1:0"
  admin: "127.0.0.1:0"
  grpc_tls: {cert_file: %q, key_file: %q, client_ca_file: %q}
bulkheads:
  catalog: {max_concurrent: 2}
`, p.cert, p.key, p.clientCA)
}

// healthOver calls gRPC health on addr with cfg.
func healthOver(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func TestGRPCMutualTLS(t *testing.T) {
	p := writeServerPKI(t)
	rn := start(t, parseConfig(t, p.yaml()))
	addr := rn.addrs["grpc"]

	if err := healthOver(t, addr, p.serverCA.ClientTLS(t, p.envoyCert, p.envoyKey)); err != nil {
		t.Fatalf("health with Envoy's client certificate: %v", err)
	}
	if err := healthOver(t, addr, p.serverCA.ClientTLS(t, nil, nil)); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	strangerCert, strangerKey := testkit.NewCA(t, "stranger CA").Issue(t, "front-proxy", false)
	if err := healthOver(t, addr, p.serverCA.ClientTLS(t, strangerCert, strangerKey)); err == nil {
		t.Fatal("a client certificate from another CA was accepted")
	}
	if err := healthOver(t, addr, &tls.Config{InsecureSkipVerify: true}); err == nil { //nolint:gosec // the point of the test
		t.Fatal("a client without a certificate was served")
	}
	if got := counter(t, rn, "bulkhead_grpc_tls_reloads_total", "success"); got != 1 {
		t.Errorf("reloads{success} = %v, want 1 (the start)", got)
	}
}

// Rotation: new files, renamed over the old ones or written in place, are
// served to the next connection; a change that does not load keeps the last
// good certificate and is counted once; connections already open keep
// working throughout.
func TestGRPCTLSReload(t *testing.T) {
	p := writeServerPKI(t)
	rn := start(t, parseConfig(t, p.yaml()), withTLSCheckInterval(5*time.Millisecond))
	addr := rn.addrs["grpc"]
	client := p.serverCA.ClientTLS(t, p.envoyCert, p.envoyKey)
	first, err := testkit.ServedSerial(addr, client)
	if err != nil {
		t.Fatal(err)
	}
	// A connection made before the rotation; it must outlive it.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(client)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	if _, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}

	// 1. Renamed over: key first, then certificate (between the two the pair
	// does not match; that state is retried, not served).
	cert2, key2 := p.serverCA.Issue(t, "bulkhead", true)
	testkit.Replace(t, p.key, key2)
	if got, err := testkit.ServedSerial(addr, client); err != nil || got.Cmp(first) != 0 {
		t.Fatalf("mid-rotation: serial %v, %v; want the old %v", got, err, first)
	}
	testkit.Replace(t, p.cert, cert2)
	second := testkit.Serial(t, cert2)
	if second.Cmp(first) == 0 {
		t.Fatal("the CA issued the same serial twice")
	}
	testkit.WaitServedSerial(t, "the renamed-over certificate served", addr, client, second)

	// 2. Written in place (same inode).
	cert3, key3 := p.serverCA.Issue(t, "bulkhead", true)
	if err := os.WriteFile(p.key, key3, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.cert, cert3, 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.WaitServedSerial(t, "the certificate written in place served", addr, client, testkit.Serial(t, cert3))

	// 3. A broken certificate keeps the last good one, counted once
	// however many handshakes see it.
	failuresBefore := counter(t, rn, "bulkhead_grpc_tls_reloads_total", "failure")
	testkit.Replace(t, p.cert, []byte("not a certificate"))
	for range 3 {
		if got, err := testkit.ServedSerial(addr, client); err != nil || got.Cmp(testkit.Serial(t, cert3)) != 0 {
			t.Fatalf("with a broken certificate file: serial %v, %v; want the last good %v", got, err, testkit.Serial(t, cert3))
		}
	}
	brokenCountedOnce(t, rn, "bulkhead_grpc_tls_reloads_total", addr, client, testkit.Serial(t, cert3), failuresBefore)
	testkit.Replace(t, p.cert, cert3) // the pair matches again: a new load
	cert4, key4 := p.serverCA.Issue(t, "bulkhead", true)
	testkit.Replace(t, p.key, key4)
	testkit.Replace(t, p.cert, cert4)
	testkit.WaitServedSerial(t, "a good certificate after a broken one", addr, client, testkit.Serial(t, cert4))

	// 4. The client CA rotates too: Envoy's old certificate is refused on new
	// connections, one from the new CA is accepted.
	newEnvoyCA := testkit.NewCA(t, "envoy CA 2")
	testkit.Replace(t, p.clientCA, newEnvoyCA.PEM)
	testkit.Eventually(t, "the old client certificate refused", func() bool { return healthOver(t, addr, client) != nil })
	c2, k2 := newEnvoyCA.Issue(t, "front-proxy", false)
	if err := healthOver(t, addr, p.serverCA.ClientTLS(t, c2, k2)); err != nil {
		t.Fatalf("client certificate of the new CA: %v", err)
	}

	if _, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("the connection made before the rotations: %v", err)
	}
	if got := counter(t, rn, "bulkhead_grpc_tls_reloads_total", "success"); got < 5 {
		t.Errorf("reloads{success} = %v, want at least 5", got)
	}
}

func TestGRPCTLSUnusableAtStart(t *testing.T) {
	p := writeServerPKI(t)
	if err := os.WriteFile(p.key, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(parseConfig(t, p.yaml()), slogDiscard())
	if err == nil || !strings.Contains(err.Error(), "listen.grpc_tls") || !strings.Contains(err.Error(), p.key) {
		t.Fatalf("New = %v, want an error naming listen.grpc_tls and the key file", err)
	}
	_, key := p.serverCA.Issue(t, "bulkhead", true)
	testkit.Replace(t, p.key, key) // a key, but not the certificate's
	_, err = New(parseConfig(t, p.yaml()), slogDiscard())
	if err == nil || !strings.Contains(err.Error(), "private key does not match public key") {
		t.Fatalf("New with another key = %v", err)
	}
	p = writeServerPKI(t)
	_, err = New(parseConfig(t, strings.Replace(p.yaml(), p.clientCA, filepath.Join(p.dir, "absent"), 1)), slogDiscard())
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("New with a missing client CA = %v", err)
	}
}

func TestGRPCTLSDefaultsOff(t *testing.T) {
	cfg := parseConfig(t, baseYAML)
	if cfg.Listen.GRPCTLS != (config.TLSFiles{}) {
		t.Fatal("TLS on by default")
	}
	rn := start(t, cfg)
	if _, body := rn.get(t, "/metrics"); strings.Contains(body, "bulkhead_grpc_tls_not_after") {
		t.Error("a plain listener exports a certificate expiry")
	}
}

// counter reads one series of a counter or gauge (vector) from the
// runner's registry: the one with a label of value labelValue, or the
// unlabelled one for "".
func counter(t *testing.T, rn *running, name, labelValue string) float64 {
	t.Helper()
	mfs, err := rn.r.promReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelValue == "" && len(m.GetLabel()) == 0 {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetValue() == labelValue {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// brokenCountedOnce handshakes with addr until the listener's reload
// failures (metric) pass before, each handshake served the last good
// certificate (serial good), then three more past the check interval that
// must not count the broken file again. The files are checked on a
// handshake at most every check interval (5 ms in these tests): on a quiet
// machine a few handshakes can all come within one, and none checks.
func brokenCountedOnce(t *testing.T, rn *running, metric, addr string, client *tls.Config, good *big.Int, before float64) {
	t.Helper()
	serve := func() {
		if got, err := testkit.ServedSerial(addr, client); err != nil || got.Cmp(good) != 0 {
			t.Fatalf("with a broken certificate file: serial %v, %v; want the last good %v", got, err, good)
		}
	}
	testkit.Eventually(t, "the broken certificate counted", func() bool {
		serve()
		return counter(t, rn, metric, "failure") > before
	})
	for range 3 {
		time.Sleep(6 * time.Millisecond) // past the check interval, so that each handshake checks again
		serve()
	}
	if got := counter(t, rn, metric, "failure"); got != before+1 {
		t.Errorf("%s failures %v -> %v, want one more", metric, before, got)
	}
}
