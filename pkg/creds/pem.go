package creds

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// MaxPEMSize bounds each TLS file (certificate, key, CA bundle).
const MaxPEMSize = 1 << 20

// Errors of the PEM content of TLS files.
var (
	// ErrNoCertificate: a certificate or CA file holds no PEM certificate.
	ErrNoCertificate = errors.New("no PEM certificate")
	// ErrKeyPair: the key file does not hold the private key of the
	// certificate (or no usable private key).
	ErrKeyPair = errors.New("not the private key of the certificate")
)

// KeyPair parses a server certificate (leaf first) and its private key.
// The error wraps ErrNoCertificate when certPEM holds no certificate, else
// ErrKeyPair and crypto/tls's reason; it never shows the key. The result's
// Leaf is set.
func KeyPair(certPEM, keyPEM []byte) (tls.Certificate, error) {
	if !hasCertificate(certPEM) {
		return tls.Certificate{}, ErrNoCertificate
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%w: %s", ErrKeyPair, strings.TrimPrefix(err.Error(), "tls: "))
	}
	if pair.Leaf == nil { // GODEBUG=x509keypairleaf=0
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("%w: %w", ErrNoCertificate, err)
		}
	}
	return pair, nil
}

// CertPool parses a bundle of CA certificates. The error wraps
// ErrNoCertificate when it holds none.
func CertPool(caPEM []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, ErrNoCertificate
	}
	return pool, nil
}

// hasCertificate reports whether data holds at least one PEM block of type
// CERTIFICATE that parses as an X.509 certificate.
func hasCertificate(data []byte) bool {
	// Each iteration consumes a block, so the input's length bounds the loop.
	for range len(data) {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return false
		}
		if block.Type == "CERTIFICATE" {
			if _, err := x509.ParseCertificate(block.Bytes); err == nil {
				return true
			}
		}
	}
	return false
}
