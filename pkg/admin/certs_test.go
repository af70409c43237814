package admin_test

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin/admintest"
)

// clientTLS returns a client configuration trusting ca, presenting the
// given key pair (none when certPEM is nil).
func clientTLS(t *testing.T, ca *admintest.CA, certPEM, keyPEM []byte) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}
