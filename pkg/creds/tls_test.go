package creds_test

import (
	"crypto/tls"
	"errors"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// pki is a server key pair and a client CA bundle on disk.
type pki struct {
	dir                     string
	ca                      *testkit.CA
	cert, key, otherKey, cl string
}

func writePKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), ca: testkit.NewCA(t, "bulkhead CA")}
	cert, key := p.ca.Issue(t, "bulkhead", true)
	_, other := p.ca.Issue(t, "other", true)
	p.cert = testkit.WriteFile(t, p.dir, "tls.crt", cert)
	p.key = testkit.WriteFile(t, p.dir, "tls.key", key)
	p.otherKey = testkit.WriteFile(t, p.dir, "other.key", other)
	p.cl = testkit.WriteFile(t, p.dir, "client-ca.crt", testkit.NewCA(t, "client CA").PEM)
	return p
}

// recorder records loads.
type recorder struct {
	ok, failed int
	listener   string
	notAfter   time.Time
}

func (r *recorder) Reloaded(listener string, ok bool, notAfter time.Time) {
	r.listener = listener
	if ok {
		r.ok++
		r.notAfter = notAfter
	} else {
		r.failed++
	}
}

// handshake returns the configuration cfg gives a client now.
func handshake(t *testing.T, cfg *tls.Config) *tls.Config {
	t.Helper()
	c, err := cfg.GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewTLS(t *testing.T) {
	p := writePKI(t)
	rec := &recorder{}
	tl, err := creds.NewTLS("admin", creds.Files{CertFile: p.cert, KeyFile: p.key, ClientCAFile: p.cl}, creds.WithRecorder(rec))
	if err != nil {
		t.Fatal(err)
	}
	if !tl.MutualTLS() || (*creds.TLS)(nil).MutualTLS() {
		t.Error("MutualTLS")
	}
	if rec.ok != 1 || rec.listener != "admin" || rec.notAfter.IsZero() {
		t.Errorf("recorded %+v, want one load of admin with an expiry", rec)
	}
	for _, protos := range [][]string{{"h2"}, {"h2", "http/1.1"}} {
		c := handshake(t, tl.ServerConfig(protos...))
		if !slices.Equal(c.NextProtos, protos) || c.ClientAuth != tls.RequireAndVerifyClientCert || c.ClientCAs == nil ||
			c.MinVersion != tls.VersionTLS12 || c.Certificates[0].Leaf.Subject.CommonName != "bulkhead" {
			t.Errorf("ServerConfig(%q) serves %+v", protos, c)
		}
	}
	plain, err := creds.NewTLS("grpc", creds.Files{CertFile: p.cert, KeyFile: p.key})
	if err != nil {
		t.Fatal(err)
	}
	if c := handshake(t, plain.ServerConfig("h2")); c.ClientAuth != tls.NoClientCert || c.ClientCAs != nil || plain.MutualTLS() {
		t.Error("client certificates required without a client CA file")
	}
}

func TestNewTLSErrors(t *testing.T) {
	p := writePKI(t)
	absent := filepath.Join(p.dir, "absent")
	tests := []struct {
		name  string
		files creds.Files
		is    error
		names []string
	}{
		{"missing certificate", creds.Files{CertFile: absent, KeyFile: p.key}, fs.ErrNotExist, []string{absent}},
		{"missing key", creds.Files{CertFile: p.cert, KeyFile: absent}, fs.ErrNotExist, []string{absent}},
		{"certificate not PEM", creds.Files{CertFile: p.key, KeyFile: p.key}, creds.ErrNoCertificate, []string{p.key}},
		{"wrong key", creds.Files{CertFile: p.cert, KeyFile: p.otherKey}, creds.ErrKeyPair, []string{p.cert, p.otherKey, "private key does not match public key"}},
		{"CA without certificate", creds.Files{CertFile: p.cert, KeyFile: p.key, ClientCAFile: p.key}, creds.ErrNoCertificate, []string{p.key}},
		{"CA a directory", creds.Files{CertFile: p.cert, KeyFile: p.key, ClientCAFile: p.dir}, creds.ErrNotRegular, []string{p.dir}},
		{"CA missing", creds.Files{CertFile: p.cert, KeyFile: p.key, ClientCAFile: absent}, fs.ErrNotExist, []string{absent}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := creds.NewTLS("grpc", tt.files)
			if !errors.Is(err, tt.is) {
				t.Fatalf("NewTLS = %v, want %v", err, tt.is)
			}
			for _, s := range tt.names {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%v does not name %s", err, s)
				}
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Fatalf("error shows a key: %v", err)
			}
		})
	}
}

// The files are read at most once per interval, however many handshakes
// come; a change shows from the first handshake after the interval; a
// change that does not load is recorded once and keeps the last good pair.
func TestTLSChecksOncePerInterval(t *testing.T) {
	p := writePKI(t)
	clk := clock.NewFake(time.Now())
	rec := &recorder{}
	tl, err := creds.NewTLS("grpc", creds.Files{CertFile: p.cert, KeyFile: p.key},
		creds.WithClock(clk), creds.WithRecorder(rec), creds.WithCheckInterval(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cfg := tl.ServerConfig("h2")
	leafSerial := func() *big.Int {
		t.Helper()
		return handshake(t, cfg).Certificates[0].Leaf.SerialNumber
	}
	first := leafSerial()
	cert, key := p.ca.Issue(t, "bulkhead", true)
	testkit.Replace(t, p.key, key)
	testkit.Replace(t, p.cert, cert)
	clk.Advance(999 * time.Millisecond)
	for range 100 {
		if leafSerial().Cmp(first) != 0 {
			t.Fatal("files read again within the interval")
		}
	}
	clk.Advance(time.Millisecond)
	if second := leafSerial(); second.Cmp(first) == 0 {
		t.Fatal("the rotated certificate not served after the interval")
	}
	if rec.ok != 2 || rec.failed != 0 {
		t.Fatalf("loads ok=%d failed=%d, want 2 and 0", rec.ok, rec.failed)
	}
	// Unchanged files: read, not loaded again.
	clk.Advance(time.Hour)
	second := leafSerial()
	if rec.ok != 2 {
		t.Fatalf("unchanged files loaded again: ok=%d", rec.ok)
	}
	// A missing file is one failure, however long it lasts.
	if err := os.Remove(p.key); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clk.Advance(time.Hour)
		if leafSerial().Cmp(second) != 0 {
			t.Fatal("the last good certificate not served while the key is missing")
		}
	}
	if rec.failed != 1 {
		t.Fatalf("failures = %d, want 1", rec.failed)
	}
}
