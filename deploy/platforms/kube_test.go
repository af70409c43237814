package platforms

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// kubeCluster is etcd and kube-apiserver on loopback, for one test: an
// API server with its admission and validation and no kubelet, scheduler
// or controller manager (nothing runs the pods, and nothing garbage
// collects).
type kubeCluster struct {
	kubeconfig string // for helm
	config     *rest.Config
	dyn        dynamic.Interface
	disco      discovery.DiscoveryInterface
}

// findKube returns the kube-apiserver and etcd that `make kube-server`
// builds into .bin/ (or $KUBE_APISERVER_BIN and $ETCD_BIN). The tests that
// start them run only with BULKHEAD_REQUIRE_KUBE=1 (make platforms-test
// and make test set it), and then fail without them.
func findKube(t testing.TB) (apiserver, etcd string) {
	t.Helper()
	const hint = "run `make kube-server` (builds kube-apiserver and etcd into .bin/ once)"
	if os.Getenv("BULKHEAD_REQUIRE_KUBE") != "1" {
		t.Skip("starts etcd and kube-apiserver: only with BULKHEAD_REQUIRE_KUBE=1, as `make platforms-test` and `make test` run it (`make kube-server` builds them into .bin/)")
	}
	return findTool(t, "KUBE_APISERVER_BIN", "kube-apiserver-", "BULKHEAD_REQUIRE_KUBE", hint),
		findTool(t, "ETCD_BIN", "etcd-", "BULKHEAD_REQUIRE_KUBE", hint)
}

// startKube starts etcd and kube-apiserver (TLS with a CA of its own, a
// client certificate in system:masters, RBAC) and waits until the API
// server is ready. Both stop when the test ends.
func startKube(t *testing.T) *kubeCluster {
	t.Helper()
	apiserverBin, etcdBin := findKube(t)
	dir := t.TempDir()
	pki := newPKI(t, dir)

	etcdURL, peerURL := "http://"+freeAddr(t), "http://"+freeAddr(t)
	startProcess(t, dir, "etcd", etcdBin,
		"--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync", "--log-level=warn")
	waitFor(t, time.Minute, "etcd healthy", func() error { return getOK(http.DefaultClient, etcdURL+"/health") })

	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	startProcess(t, dir, "kube-apiserver", apiserverBin,
		"--etcd-servers="+etcdURL,
		"--bind-address="+host, "--secure-port="+port, "--advertise-address="+host,
		"--tls-cert-file="+pki.serverCert, "--tls-private-key-file="+pki.serverKey,
		"--client-ca-file="+pki.caCert,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki.saPub, "--service-account-signing-key-file="+pki.saKey,
		"--service-cluster-ip-range=10.96.0.0/24",
		// No Endpoints for the kubernetes Service: loopback addresses are
		// refused there, and nothing here needs it.
		"--endpoint-reconciler-type=none",
		"--profiling=false")

	k := &kubeCluster{
		kubeconfig: filepath.Join(dir, "kubeconfig"),
		config: &rest.Config{
			Host: "https://" + addr,
			TLSClientConfig: rest.TLSClientConfig{
				CAFile: pki.caCert, CertFile: pki.adminCert, KeyFile: pki.adminKey,
			},
			QPS: 200, Burst: 400,
			// Not the deprecation warnings of listing every kind (leftovers).
			WarningHandler: rest.NoWarnings{},
		},
	}
	writeKubeconfig(t, k.kubeconfig, k.config)
	client, err := rest.HTTPClientFor(k.config)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "kube-apiserver ready", func() error { return getOK(client, k.config.Host+"/readyz") })
	if k.dyn, err = dynamic.NewForConfig(k.config); err != nil {
		t.Fatal(err)
	}
	if k.disco, err = discovery.NewDiscoveryClientForConfig(k.config); err != nil {
		t.Fatal(err)
	}
	v, err := k.disco.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if want := kubeVersion(t); v.GitVersion != want {
		t.Fatalf("%s reports version %s, but deploy/platforms/kubeserver/go.mod pins k8s.io/kubernetes %s: "+
			"KUBE_VERSION in the Makefile must match it (then make kube-server)", apiserverBin, v.GitVersion, want)
	}
	return k
}

// startProcess starts a server, its output in dir/<name>.log, and stops
// it (SIGTERM, then SIGKILL after 10 s) when the test ends; a failed test
// shows the end of the log.
func startProcess(t *testing.T, dir, name, bin string, args ...string) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
		if t.Failed() {
			t.Logf("%s: the end of its log:\n%s", name, tail(logPath, 40))
		}
	})
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitFor polls check until it returns nil, failing the test after d.
func waitFor(t testing.TB, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
}

// getOK is nil when GET url answers 200.
func getOK(c *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(body.String()))
	}
	return nil
}

// freeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeKubeconfig writes a kubeconfig for c (helm reads it).
func writeKubeconfig(t testing.TB, path string, c *rest.Config) {
	t.Helper()
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, certificate-authority: %q}
users:
- name: admin
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, c.Host, c.CAFile, c.CertFile, c.KeyFile)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
}

// pki is the files of a CA made for one test: the API server's serving
// certificate, an admin client certificate (group system:masters) and the
// service-account signing key.
type pki struct {
	caCert, serverCert, serverKey, adminCert, adminKey, saKey, saPub string
}

func newPKI(t testing.TB, dir string) pki {
	t.Helper()
	p := pki{
		caCert:     filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "server.crt"), serverKey: filepath.Join(dir, "server.key"),
		adminCert: filepath.Join(dir, "admin.crt"), adminKey: filepath.Join(dir, "admin.key"),
		saKey: filepath.Join(dir, "sa.key"), saPub: filepath.Join(dir, "sa.pub"),
	}
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bulkhead-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.caCert, "CERTIFICATE", caDER)
	issue := func(serial int64, subject pkix.Name, usage x509.ExtKeyUsage, certPath, keyPath string, dns []string, ips []net.IP) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: subject,
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: dns, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, certPath, "CERTIFICATE", der)
		writeKey(t, keyPath, key)
	}
	issue(2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth, p.serverCert, p.serverKey,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)})
	issue(3, pkix.Name{CommonName: "bulkhead-test", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth,
		p.adminCert, p.adminKey, nil, nil)
	sa := newKey(t)
	writeKey(t, p.saKey, sa)
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.saPub, "PUBLIC KEY", pub)
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writeKey(t testing.TB, path string, k *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
