package admin

import (
	"errors"
	"fmt"
	"net"

	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
)

// ErrInsecureListen is returned by CheckListen for a non-loopback admin
// address with neither a token nor mTLS.
var ErrInsecureListen = errors.New("admin listener exposed without authentication")

// nextProtos are the admin listener's protocols by ALPN: gRPC clients
// require h2; JSON clients may speak HTTP/1.1.
var nextProtos = []string{"h2", "http/1.1"}

// CheckListen is called by the daemon before it binds the admin listener.
// A loopback address (creds.IsLoopback) is always allowed. Any other
// address needs a bearer token in auth, or mTLS: tlsFiles (nil for plain
// TCP) with a client CA file. Otherwise the error, wrapping
// ErrInsecureListen, names the settings to add.
func CheckListen(addr string, auth *Authenticator, tlsFiles *creds.TLS) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("listen.admin: %q: %w", addr, err)
	}
	if creds.IsLoopback(addr) {
		return nil
	}
	if (auth != nil && auth.HasToken()) || tlsFiles.MutualTLS() {
		return nil
	}
	return fmt.Errorf("%w: listen.admin %q is not a loopback address; set admin.token_file "+
		"(or the environment variable BULKHEAD_ADMIN_TOKEN) for a bearer token, or admin.tls.cert_file, "+
		"admin.tls.key_file and admin.tls.client_ca_file for mTLS, or bind listen.admin to 127.0.0.1",
		ErrInsecureListen, addr)
}
