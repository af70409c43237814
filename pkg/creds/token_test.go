package creds_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
)

func TestTokenProblem(t *testing.T) {
	for tok, want := range map[string]string{
		"s3cr3t-T0KEN": "",
		"":             "is empty",
		"two words":    "must be printable ASCII without spaces",
		"caf\u00e9":    "must be printable ASCII without spaces",
		strings.Repeat("x", creds.MaxTokenSize+1): "is longer than 4096 bytes",
	} {
		if got := creds.TokenProblem(tok); got != want {
			t.Errorf("TokenProblem(%.20q) = %q, want %q", tok, got, want)
		}
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := creds.ReadToken(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: error = %v, want ErrNotExist", err)
	}
	write("first\n")
	if tok, err := creds.ReadToken(path); tok != "first" || err != nil {
		t.Errorf("ReadToken = %q, %v", tok, err)
	}
	write("not a token")
	if _, err := creds.ReadToken(path); !errors.Is(err, creds.ErrBadToken) || strings.Contains(err.Error(), "not a token") ||
		!strings.Contains(err.Error(), path) {
		t.Errorf("bad token: error = %v, want ErrBadToken naming the file, not its content", err)
	}
	write(strings.Repeat("x", creds.MaxTokenSize+1))
	if _, err := creds.ReadToken(path); !errors.Is(err, creds.ErrTooLarge) {
		t.Errorf("large file: error = %v, want ErrTooLarge", err)
	}
	if _, err := creds.ReadToken(dir); !errors.Is(err, creds.ErrNotRegular) {
		t.Errorf("directory: error = %v, want ErrNotRegular", err)
	}
}

// A token file is followed as it rotates; a rotation to an unusable token
// keeps the last good one.
func TestTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	mtime := time.Now()
	swap := func(s string) {
		t.Helper()
		mtime = mtime.Add(time.Minute) // a new mtime, whatever the file system's granularity
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(tmp, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := creds.NewTokenFile(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	swap(" \n")
	if _, err := creds.NewTokenFile(path); !errors.Is(err, creds.ErrBadToken) {
		t.Errorf("blank file: %v, want ErrBadToken", err)
	}
	swap("first-token\n")
	tf, err := creds.NewTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := tf.Current(); got != "first-token" {
		t.Fatalf("Current = %q", got)
	}
	swap("second-token")
	if got := tf.Current(); got != "second-token" {
		t.Errorf("after the swap: %q, want second-token", got)
	}
	swap("two words")
	if got := tf.Current(); got != "second-token" {
		t.Errorf("after an unusable swap: %q, want the last good token", got)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if got := tf.Current(); got != "second-token" {
		t.Errorf("file removed: %q, want the last good token", got)
	}
}
