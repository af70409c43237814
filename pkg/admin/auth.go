package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
)

// Errors of authentication. They become UNAUTHENTICATED and
// PERMISSION_DENIED (gRPC) or 401 and 403 (HTTP) at the edge.
var (
	ErrUnauthenticated  = errors.New("unauthenticated")
	ErrPermissionDenied = errors.New("permission denied")
	// ErrEmptyToken is returned by NewAuthenticator for an empty token.
	ErrEmptyToken = errors.New("admin token is empty")
)

// Authenticator decides who is calling. A caller is accepted when it
// presents the configured bearer token, or a client certificate the TLS
// layer verified (only a listener serving creds.TLS with a client CA file
// yields verified chains). With no token configured, callers without a
// certificate are accepted from loopback addresses only, as "local".
// A token presented to a server that has none configured is ignored.
type Authenticator struct {
	token tokenSource // nil: no token configured
}

// tokenSource gives the token clients must send now.
type tokenSource interface{ Current() string }

// fixedToken is a token given at start (BULKHEAD_ADMIN_TOKEN).
type fixedToken string

func (t fixedToken) Current() string { return string(t) }

var _ tokenSource = (*creds.TokenFile)(nil)

// AuthOption configures an Authenticator.
type AuthOption func(*Authenticator) error

// WithToken requires the bearer token tok (surrounding space is trimmed).
func WithToken(tok string) AuthOption {
	return func(a *Authenticator) error {
		tok = strings.TrimSpace(tok)
		if tok == "" {
			return ErrEmptyToken
		}
		a.token = fixedToken(tok)
		return nil
	}
}

// WithTokenFile requires the bearer token held in the file at path, read
// with creds.ReadToken. The file is read again when its size or
// modification time changes (which follows a Kubernetes Secret's symlink
// swap); a later read that fails or finds no usable token keeps the last
// good token.
func WithTokenFile(path string) AuthOption {
	return func(a *Authenticator) error {
		tf, err := creds.NewTokenFile(path)
		if err != nil {
			return fmt.Errorf("admin.token_file: %w", err)
		}
		a.token = tf
		return nil
	}
}

// NewAuthenticator returns an Authenticator. Without options it accepts
// loopback callers and verified client certificates only.
func NewAuthenticator(opts ...AuthOption) (*Authenticator, error) {
	a := &Authenticator{}
	for _, o := range opts {
		if err := o(a); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// HasToken reports whether a bearer token is configured.
func (a *Authenticator) HasToken() bool { return a.token != nil }

// authenticate returns the actor for a caller: the value of its
// authorization header, its TLS state (nil without TLS) and its remote
// address. The error wraps ErrUnauthenticated or ErrPermissionDenied.
func (a *Authenticator) authenticate(authorization string, state *tls.ConnectionState, remote string) (caller, error) {
	c := caller{remote: remote}
	if authorization != "" && a.token != nil {
		tok, ok := bearer(authorization)
		if !ok {
			return c, fmt.Errorf("%w: authorization: want \"Bearer TOKEN\"", ErrUnauthenticated)
		}
		if !matches(a.token, tok) {
			return c, fmt.Errorf("%w: wrong token", ErrUnauthenticated)
		}
		c.actor = "token:" + tokenID(tok)
		return c, nil
	}
	if state != nil && len(state.VerifiedChains) > 0 && len(state.PeerCertificates) > 0 {
		c.actor = "cert:" + state.PeerCertificates[0].Subject.CommonName
		return c, nil
	}
	if a.token != nil {
		return c, fmt.Errorf("%w: missing credentials: send \"authorization: Bearer TOKEN\"", ErrUnauthenticated)
	}
	if creds.IsLoopback(remote) {
		c.actor = "local"
		return c, nil
	}
	return c, fmt.Errorf("%w: this admin listener accepts loopback callers only (no token or mTLS is configured)", ErrPermissionDenied)
}

func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// tokenID names a token in logs without revealing it: the first 8 hex
// digits of its SHA-256.
func tokenID(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:4])
}

// matches compares tok with the token now configured in constant time (of
// the digests, so the length of the token does not leak either).
func matches(src tokenSource, tok string) bool {
	want := sha256.Sum256([]byte(src.Current()))
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(want[:], got[:]) == 1
}

// caller is who made a call, as recorded with a change.
type caller struct {
	actor  string // "token:…", "cert:…" or "local"
	remote string
}

// String is the actor handed to the Controller.
func (c caller) String() string {
	if c.remote == "" {
		return c.actor
	}
	return c.actor + " from " + c.remote
}

type callerKey struct{}

func withCaller(ctx context.Context, c caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

func callerFrom(ctx context.Context) (caller, bool) {
	c, ok := ctx.Value(callerKey{}).(caller)
	return c, ok
}
