package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"
)

// ServerName is the DNS name in every server certificate a CA issues (next
// to localhost and 127.0.0.1), for clients that send it as SNI, as Envoy
// does.
const ServerName = "bulkhead.test"

// validity is how long around now the certificates are valid: longer than
// any test.
const validity = 24 * time.Hour

// CA is a certificate authority made for one test.
type CA struct {
	// Cert is the CA certificate; PEM is its encoding.
	Cert *x509.Certificate
	PEM  []byte
	key  *ecdsa.PrivateKey
}

// NewCA returns a new CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-validity), NotAfter: time.Now().Add(validity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Issue returns a PEM certificate signed by ca and its PKCS#8 key: a
// server certificate for ServerName, localhost and 127.0.0.1 when server
// is set, else a client certificate; either with common name cn. Serials
// are random, so that no two certificates share one, even across CAs.
func (ca *CA) Issue(t testing.TB, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(t), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-validity), NotAfter: time.Now().Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{ServerName, "localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// ClientTLS returns a client configuration that trusts ca and presents the
// key pair certPEM/keyPEM (none when certPEM is nil). The server name is
// the dialled address's unless the caller sets one.
func (ca *CA) ClientTLS(t testing.TB, certPEM, keyPEM []byte) *tls.Config {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if certPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// Serial returns the serial number of the PEM certificate certPEM.
func Serial(t testing.TB, certPEM []byte) *big.Int {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

// ServedSerial dials addr over TLS with cfg and returns the serial of the
// certificate the server presents on this new connection, or the
// handshake's error. It offers ALPN h2 unless cfg names protocols (gRPC
// servers refuse a handshake without it), and it reads once (for up to
// 200 ms), since with TLS 1.3 a refused client certificate shows only
// there.
func ServedSerial(addr string, cfg *tls.Config) (*big.Int, error) {
	if len(cfg.NextProtos) == 0 {
		cfg = cfg.Clone()
		cfg.NextProtos = []string{"h2"}
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var ne net.Error
	if _, err := conn.Read(make([]byte, 1)); err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		return nil, err
	}
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// randomSerial returns a positive serial of at most 128 bits.
func randomSerial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n.Add(n, big.NewInt(1))
}

// WaitServedSerial waits (Eventually) until the server at addr serves the
// certificate of serial want to a client configured with cfg.
func WaitServedSerial(tb testing.TB, what, addr string, cfg *tls.Config, want *big.Int) {
	tb.Helper()
	Eventually(tb, what, func() bool {
		got, err := ServedSerial(addr, cfg)
		return err == nil && got.Cmp(want) == 0
	})
}
