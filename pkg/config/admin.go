package config

import (
	"fmt"
	"io"

	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
)

// envAdminToken is the environment variable holding the admin bearer token
// itself (admin.token_file, by contrast, holds a path).
const envAdminToken = "BULKHEAD_ADMIN_TOKEN"

// Admin secures the admin listener, Listen.Admin.
//
// Clients authenticate with "Authorization: Bearer TOKEN" when a token is
// configured (TokenFile or Token; at most one of them), with a client
// certificate when TLS.ClientCAFile is set, or both when both are.
//
// Admin formats itself (with any fmt verb) with the token redacted, and
// Token is left out of JSON, so logging a Config does not leak it.
type Admin struct {
	// TokenFile is the path of a file holding the bearer token; whitespace
	// around the token is ignored. Load checks that it holds one (with
	// creds.ReadToken); servers follow its rotation with creds.TokenFile.
	TokenFile string
	// Token is the bearer token itself, taken by Load from the environment
	// variable BULKHEAD_ADMIN_TOKEN (surrounding whitespace removed). It
	// cannot be written in the file, and never appears in an error.
	Token string `json:"-" yaml:"-"`
	TLS   TLSFiles
}

// TLSFiles configures TLS on a listener (admin.tls, listen.grpc_tls).
// CertFile and KeyFile are both set (TLS) or both empty (plain TCP, h2c);
// ClientCAFile requires them. Load checks that the files can be read, that
// the key is the certificate's and that the CA file holds a certificate,
// with the functions of package creds that serve them (see Creds).
type TLSFiles struct {
	CertFile string // PEM server certificate, leaf first
	KeyFile  string // PEM private key of CertFile
	// ClientCAFile is a PEM bundle of CA certificates; when set, clients
	// must present a certificate signed by one of them (mTLS).
	ClientCAFile string
}

// Enabled reports whether the listener serves TLS (CertFile is set).
func (t TLSFiles) Enabled() bool { return t.CertFile != "" }

// Creds returns the files for creds.NewTLS.
func (t TLSFiles) Creds() creds.Files {
	return creds.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile}
}

// Secured reports whether clients of the admin listener must authenticate:
// a bearer token (TokenFile or Token) or mTLS (TLS.ClientCAFile) is
// configured. Validation refuses a non-loopback Listen.Admin unless it holds.
func (a Admin) Secured() bool {
	return a.Token != "" || a.TokenFile != "" || a.TLS.ClientCAFile != ""
}

// String formats a with the token redacted.
func (a Admin) String() string {
	return fmt.Sprintf("{TokenFile:%s Token:%s TLS:%+v}", a.TokenFile, redact(a.Token), a.TLS)
}

// Format implements fmt.Formatter so that no verb prints the token: %#v
// gives Go syntax, every other verb String.
func (a Admin) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprintf(f, "config.Admin{TokenFile:%q, Token:%q, TLS:%#v}", a.TokenFile, redact(a.Token), a.TLS)
		return
	}
	_, _ = io.WriteString(f, a.String())
}

func redact(tok string) string {
	if tok == "" {
		return ""
	}
	return "[redacted]"
}
