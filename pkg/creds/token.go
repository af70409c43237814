package creds

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// MaxTokenSize bounds a bearer token, in bytes.
const MaxTokenSize = 4096

// ErrBadToken is wrapped by the errors for a token that is not usable
// (empty, too long, not printable ASCII). The message never contains it.
var ErrBadToken = errors.New("unusable token")

// TokenProblem says what is wrong with a token (surrounding space already
// removed), or "" if nothing: it is empty, longer than MaxTokenSize, or not
// printable ASCII without spaces (it travels in an HTTP header). The reason
// never contains the token.
func TokenProblem(tok string) string {
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

// ReadToken reads the bearer token held in the file at path, whitespace
// around it removed. Errors name the file, never its content; a file that
// holds no usable token gives one wrapping ErrBadToken.
func ReadToken(path string) (string, error) {
	data, err := ReadFile(path, MaxTokenSize)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(data))
	if reason := TokenProblem(tok); reason != "" {
		return "", fmt.Errorf("%s: %w: the token it holds %s", path, ErrBadToken, reason)
	}
	return tok, nil
}

// TokenFile is a bearer token held in a file that may be rotated: Current
// reads the file again when its size or modification time changed (which
// follows a Kubernetes Secret's symlink swap); a read that fails or finds
// no usable token keeps the last good one.
//
// It is safe for concurrent use.
type TokenFile struct {
	path string

	mu      sync.Mutex
	token   string
	size    int64
	modTime time.Time
}

// NewTokenFile reads the token at path once; the error is ReadToken's.
func NewTokenFile(path string) (*TokenFile, error) {
	t := &TokenFile{path: path}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := t.load(fi); err != nil {
		return nil, err
	}
	return t, nil
}

// Path returns the file's path.
func (t *TokenFile) Path() string { return t.path }

// Current returns the token, reading the file again if it changed.
func (t *TokenFile) Current() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fi, err := os.Stat(t.path); err == nil && (fi.Size() != t.size || !fi.ModTime().Equal(t.modTime)) {
		_ = t.load(fi) // on failure the last good token stays
	}
	return t.token
}

// load reads the token of the file whose state is fi; t.mu is held or t
// not yet shared.
func (t *TokenFile) load(fi os.FileInfo) error {
	tok, err := ReadToken(t.path)
	if err != nil {
		return err
	}
	t.token, t.size, t.modTime = tok, fi.Size(), fi.ModTime()
	return nil
}
