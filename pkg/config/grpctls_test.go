package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// grpcTLSYAML is a config whose gRPC listener serves TLS from the given files.
func grpcTLSYAML(cert, key, ca string) string {
	return fmt.Sprintf("listen:\n  grpc_tls: {cert_file: %q, key_file: %q, client_ca_file: %q}\n", cert, key, ca)
}

// The gRPC listener's TLS files get the admin listener's checks, under
// their own field paths.
func TestLoadGRPCTLSFiles(t *testing.T) {
	p := writePKI(t)
	absent := filepath.Join(p.dir, "absent")
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	tests := []struct {
		name string
		yaml string
		want []string // whole problem lines less the source; none: valid
	}{
		{"mTLS", grpcTLSYAML(p.cert, p.key, p.ca), nil},
		{"TLS only", grpcTLSYAML(p.cert, p.key, ""), nil},
		{"gRPC and admin share a key pair", grpcTLSYAML(p.cert, p.key, p.ca) + adminYAML("", p.cert, p.key, ""), nil},
		{"certificate missing", grpcTLSYAML(absent, p.key, ""), []string{"listen.grpc_tls.cert_file: file does not exist (got " + q(absent) + ")"}},
		{"certificate not PEM", grpcTLSYAML(p.token, p.key, ""), []string{"listen.grpc_tls.cert_file: holds no PEM certificate (got " + q(p.token) + ")"}},
		{"key of another certificate", grpcTLSYAML(p.cert, p.otherKey, ""),
			[]string{"listen.grpc_tls.key_file: is not the private key of listen.grpc_tls.cert_file: private key does not match public key (got " + q(p.otherKey) + ")"}},
		{"client CA not PEM", grpcTLSYAML(p.cert, p.key, p.key), []string{"listen.grpc_tls.client_ca_file: holds no PEM certificate (got " + q(p.key) + ")"}},
		{"client CA a directory", grpcTLSYAML(p.cert, p.key, p.dir), []string{"listen.grpc_tls.client_ca_file: must be a regular file (got " + q(p.dir) + ")"}},
		{"problems of both listeners at once", grpcTLSYAML(absent, absent, absent) + adminYAML("", absent, p.key, ""), []string{
			"admin.tls.cert_file: file does not exist",
			"listen.grpc_tls.cert_file: file does not exist",
			"listen.grpc_tls.client_ca_file: file does not exist",
			"listen.grpc_tls.key_file: file does not exist",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			c, err := Load(writeFile(t, tt.yaml), nil)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if c.Listen.GRPCTLS.CertFile != p.cert || !c.Listen.GRPCTLS.Enabled() {
					t.Errorf("listen.grpc_tls = %+v", c.Listen.GRPCTLS)
				}
				return
			}
			var ie *InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("Load = %+v, %v; want an *InvalidError", c, err)
			}
			if len(ie.Problems) != len(tt.want) {
				t.Errorf("problems:\n%v\nwant %d", err, len(tt.want))
			}
			for _, w := range tt.want {
				if !hasLineWithPrefix(err.Error(), ie.Source+": "+w) {
					t.Errorf("error\n%v\nhas no line starting %q", err, w)
				}
			}
		})
	}
	t.Run("Parse reads no file", func(t *testing.T) {
		if _, err := Parse(testSource, []byte(grpcTLSYAML(absent, absent, absent))); err != nil {
			t.Errorf("Parse: %v", err)
		}
	})
}

func TestGRPCTLSEnv(t *testing.T) {
	p := writePKI(t)
	clearEnv(t)
	t.Setenv("BULKHEAD_LISTEN_GRPC_TLS_CERT_FILE", p.cert)
	t.Setenv("BULKHEAD_LISTEN_GRPC_TLS_KEY_FILE", p.key)
	t.Setenv("BULKHEAD_LISTEN_GRPC_TLS_CLIENT_CA_FILE", p.ca)
	c, err := Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (TLSFiles{CertFile: p.cert, KeyFile: p.key, ClientCAFile: p.ca}); c.Listen.GRPCTLS != want {
		t.Errorf("listen.grpc_tls = %+v, want %+v", c.Listen.GRPCTLS, want)
	}
	if err := os.Remove(p.key); err != nil {
		t.Fatal(err)
	}
	_, err = Load("", nil)
	if want := "config: listen.grpc_tls.key_file: file does not exist (got " + fmt.Sprintf("%q", p.key) +
		" from BULKHEAD_LISTEN_GRPC_TLS_KEY_FILE)"; err == nil || !hasLineWithPrefix(err.Error(), want) {
		t.Errorf("error = %v, want a line %q", err, want)
	}
}
