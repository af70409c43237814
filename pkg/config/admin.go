package config

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// envAdminToken is the environment variable holding the admin bearer token
// itself (admin.token_file, by contrast, holds a path).
const envAdminToken = "BULKHEAD_ADMIN_TOKEN"

// MaxTokenSize bounds an admin bearer token, in bytes.
const MaxTokenSize = 4096

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
	// around the token is ignored. Load checks that it holds one; the admin
	// server re-reads it, to follow rotation.
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
// the key is the certificate's and that the CA file holds a certificate.
type TLSFiles struct {
	CertFile string // PEM server certificate, leaf first
	KeyFile  string // PEM private key of CertFile
	// ClientCAFile is a PEM bundle of CA certificates; when set, clients
	// must present a certificate signed by one of them (mTLS).
	ClientCAFile string
}

// Enabled reports whether the listener serves TLS (CertFile is set).
func (t TLSFiles) Enabled() bool { return t.CertFile != "" }

// Secured reports whether clients of the admin listener must authenticate:
// a bearer token (TokenFile or Token) or mTLS (TLS.ClientCAFile) is
// configured. Validation refuses a non-loopback Listen.Admin unless it holds.
func (a Admin) Secured() bool {
	return a.Token != "" || a.TokenFile != "" || a.TLS.ClientCAFile != ""
}

// tokenProblem says what is wrong with a (trimmed) token, or "" if nothing.
// The reason never contains the token.
func tokenProblem(tok string) string {
	if tok == "" {
		return "is empty"
	}
	if len(tok) > MaxTokenSize {
		return fmt.Sprintf("is longer than %d bytes", MaxTokenSize)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < '!' || tok[i] > '~' {
			return "must be printable ASCII without spaces"
		}
	}
	return ""
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

// readSmall reads the regular file at path, refusing one over limit bytes.
// It checks the type before opening, so that a FIFO cannot block it. Errors
// name the path.
func readSmall(path string, limit int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", path, errNotRegular)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w of %d bytes", path, errTooLarge, limit)
	}
	return data, nil
}

var (
	errNotRegular = errors.New("not a regular file")
	errTooLarge   = errors.New("over the limit")
)
