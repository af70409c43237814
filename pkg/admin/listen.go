package admin

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// Errors of the listener configuration.
var (
	// ErrInsecureListen: a non-loopback admin address with neither a token
	// nor mTLS.
	ErrInsecureListen = errors.New("admin listener exposed without authentication")
	// ErrTLSConfig: an incomplete or unreadable admin.tls configuration.
	ErrTLSConfig = errors.New("admin TLS configuration")
)

// CheckListen is called by the daemon before it binds the admin listener.
// A loopback address (127.0.0.0/8, ::1 or localhost) is always allowed.
// Any other address needs a bearer token in auth, or mTLS: tlsCfg (from
// TLSConfig) requiring and verifying client certificates. Otherwise the
// error, wrapping ErrInsecureListen, names the settings to add.
func CheckListen(addr string, auth *Authenticator, tlsCfg *tls.Config) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen.admin: %q: %w", addr, err)
	}
	if host == "localhost" || isLoopback(host) {
		return nil
	}
	mtls := tlsCfg != nil && tlsCfg.ClientAuth == tls.RequireAndVerifyClientCert && tlsCfg.ClientCAs != nil
	if (auth != nil && auth.HasToken()) || mtls {
		return nil
	}
	return fmt.Errorf("%w: listen.admin %q is not a loopback address; set admin.token_file "+
		"(or the environment variable BULKHEAD_ADMIN_TOKEN) for a bearer token, or admin.tls.cert_file, "+
		"admin.tls.key_file and admin.tls.client_ca_file for mTLS, or bind listen.admin to 127.0.0.1",
		ErrInsecureListen, addr)
}

// TLSConfig returns the admin listener's TLS configuration, or nil when
// every argument is empty (plain TCP; gRPC then uses cleartext HTTP/2).
// certFile and keyFile are the server's key pair (PEM); a non-empty
// clientCAFile makes client certificates required and verified against
// the CAs it holds (mTLS). Errors wrap ErrTLSConfig and name the field.
func TLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" && clientCAFile == "" {
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("%w: admin.tls.cert_file and admin.tls.key_file must be set together "+
			"(admin.tls.client_ca_file needs both)", ErrTLSConfig)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: admin.tls.cert_file, admin.tls.key_file: %w", ErrTLSConfig, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"}, // gRPC clients require h2 by ALPN
	}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: admin.tls.client_ca_file: %w", ErrTLSConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: admin.tls.client_ca_file: %s holds no PEM certificate", ErrTLSConfig, clientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
