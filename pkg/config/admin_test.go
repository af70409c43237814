package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// The tests here that call Load change the environment: not parallel.

// pki is a set of admin files in a temporary directory: a CA, a server
// certificate it signed with its key, another key, and a token file.
type pki struct{ dir, ca, cert, key, otherKey, token string }

const testToken = "s3cr3t-T0KEN-value"

func writePKI(t *testing.T) pki {
	t.Helper()
	p := pki{dir: t.TempDir()}
	ca := testkit.NewCA(t, "test CA")
	cert, key := ca.Issue(t, "bulkhead", true)
	_, otherKey := ca.Issue(t, "other", true)
	p.ca = testkit.WriteFile(t, p.dir, "ca.crt", ca.PEM)
	p.cert = testkit.WriteFile(t, p.dir, "tls.crt", cert)
	p.key = testkit.WriteFile(t, p.dir, "tls.key", key)
	p.otherKey = testkit.WriteFile(t, p.dir, "other.key", otherKey)
	p.token = testkit.WriteFile(t, p.dir, "token", []byte(testToken+"\n"))
	return p
}

func copyFile(t *testing.T, src string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// adminYAML is a config whose admin section names the given files.
func adminYAML(token, cert, key, ca string) string {
	return fmt.Sprintf("admin:\n  token_file: %q\n  tls: {cert_file: %q, key_file: %q, client_ca_file: %q}\n",
		token, cert, key, ca)
}

func TestLoadAdminFiles(t *testing.T) {
	p := writePKI(t)
	write := func(name, content string) string {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	absent := filepath.Join(p.dir, "absent")
	link := filepath.Join(t.TempDir(), "tls.crt") // Kubernetes mounts secrets as symlinks
	if err := os.Symlink(p.cert, link); err != nil {
		t.Fatal(err)
	}
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	tests := []struct {
		name string
		yaml string
		want []string // whole problem lines less the source; none: valid
	}{
		{"every file valid", adminYAML(p.token, p.cert, p.key, p.ca), nil},
		{"TLS without token or CA", adminYAML("", p.cert, p.key, ""), nil},
		{"symlinked certificate", adminYAML("", link, p.key, p.ca), nil},
		{"token file missing", adminYAML(absent, "", "", ""), []string{"admin.token_file: file does not exist (got " + q(absent) + ")"}},
		{"token file a directory", adminYAML(p.dir, "", "", ""), []string{"admin.token_file: must be a regular file (got " + q(p.dir) + ")"}},
		{"token file blank", adminYAML(write("t", " \n\t\n"), "", "", ""), []string{"admin.token_file: the token it holds is empty"}},
		{"token with a space", adminYAML(write("t", "two words\n"), "", "", ""),
			[]string{"admin.token_file: the token it holds must be printable ASCII without spaces"}},
		{"token too large", adminYAML(write("t", strings.Repeat("x", creds.MaxTokenSize+1)), "", "", ""),
			[]string{"admin.token_file: file is larger than 4096 bytes"}},
		{"certificate missing", adminYAML("", absent, p.key, ""), []string{"admin.tls.cert_file: file does not exist (got " + q(absent) + ")"}},
		{"certificate not PEM", adminYAML("", p.token, p.key, ""), []string{"admin.tls.cert_file: holds no PEM certificate (got " + q(p.token) + ")"}},
		{"certificate is a key", adminYAML("", p.key, p.key, ""), []string{"admin.tls.cert_file: holds no PEM certificate"}},
		{"key of another certificate", adminYAML("", p.cert, p.otherKey, ""),
			[]string{"admin.tls.key_file: is not the private key of admin.tls.cert_file: private key does not match public key (got " + q(p.otherKey) + ")"}},
		{"key not PEM", adminYAML("", p.cert, p.token, ""), []string{"admin.tls.key_file: is not the private key of admin.tls.cert_file: "}},
		{"key missing", adminYAML("", p.cert, absent, ""), []string{"admin.tls.key_file: file does not exist"}},
		{"client CA not PEM", adminYAML("", p.cert, p.key, p.key), []string{"admin.tls.client_ca_file: holds no PEM certificate (got " + q(p.key) + ")"}},
		{"every file missing", adminYAML(absent, absent, absent, absent), []string{
			"admin.tls.cert_file: file does not exist",
			"admin.tls.client_ca_file: file does not exist",
			"admin.tls.key_file: file does not exist",
			"admin.token_file: file does not exist",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			c, err := Load(write("bulkhead.yaml", tt.yaml), nil)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Load: %v", err)
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
			if strings.Contains(err.Error(), testToken) {
				t.Errorf("error shows the token: %v", err)
			}
		})
	}
	t.Run("Parse reads no file", func(t *testing.T) {
		if _, err := Parse(testSource, []byte(adminYAML(absent, absent, absent, absent))); err != nil {
			t.Errorf("Parse: %v", err)
		}
	})
}

func TestLoadAdminFileUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads any file")
	}
	clearEnv(t)
	p := writePKI(t)
	if err := os.Chmod(p.token, 0); err != nil {
		t.Fatal(err)
	}
	_, err := Load(writeFile(t, adminYAML(p.token, "", "", "")), nil)
	if err == nil || !strings.Contains(err.Error(), "admin.token_file: file cannot be read: permission denied") {
		t.Errorf("error = %v", err)
	}
}

func TestAdminTokenEnv(t *testing.T) {
	p := writePKI(t)
	tests := []struct {
		name, yaml, token string
		want              string // a problem line less the source; "": valid
	}{
		{"token on loopback", "", testToken, ""},
		{"token lets admin bind anywhere", "listen: {admin: 0.0.0.0:9091}\n", "  " + testToken + "\n", ""},
		{"empty token", "", "", "BULKHEAD_ADMIN_TOKEN: is set but empty (unset it, or set it to the token)"},
		{"blank token", "listen: {admin: 0.0.0.0:9091}\n", " \n", "BULKHEAD_ADMIN_TOKEN: is set but empty"},
		{"token with a space", "", testToken + " " + testToken, "BULKHEAD_ADMIN_TOKEN: must be printable ASCII without spaces"},
		{"token and token file", adminYAML(p.token, "", "", ""), testToken,
			fmt.Sprintf("admin.token_file: set either admin.token_file or BULKHEAD_ADMIN_TOKEN, not both (got %q)", p.token)},
		{"token with other problems", "listen: {admin: nowhere}\nauthz: {deny_status: 1}\n", testToken, "authz.deny_status: must be in 400..599"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			t.Setenv(envAdminToken, tt.token)
			c, err := Load(writeFile(t, tt.yaml), nil)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if c.Admin.Token != testToken || !c.Admin.Secured() {
					t.Errorf("Admin.Token not taken (trimmed) from the environment: %q", c.Admin.Token)
				}
				for _, s := range []string{
					fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprintf("%s", c.Admin),
					fmt.Sprintf("%q", c.Admin), fmt.Sprintf("%x", c.Admin), fmt.Sprintf("%d", c.Admin), fmt.Sprint(c.Admin.String()),
				} {
					if strings.Contains(s, testToken) {
						t.Errorf("formatting shows the token: %s", s)
					}
				}
				if data, err := json.Marshal(c); err != nil || strings.Contains(string(data), testToken) {
					t.Errorf("JSON = %s, %v", data, err)
				}
				return
			}
			if err == nil || !hasLineWithPrefix(err.Error(), ie(err)+": "+tt.want) {
				t.Fatalf("error\n%v\nhas no line starting %q", err, tt.want)
			}
			if strings.Contains(err.Error(), testToken) {
				t.Errorf("error shows the token: %v", err)
			}
		})
	}
	t.Run("Parse ignores the token", func(t *testing.T) {
		clearEnv(t)
		t.Setenv(envAdminToken, testToken)
		c, err := Parse(testSource, nil)
		if err != nil || c.Admin.Token != "" {
			t.Errorf("Parse = %+v, %v", c, err)
		}
		if _, err := Parse(testSource, []byte("listen: {admin: 0.0.0.0:1}\n")); err == nil {
			t.Error("Parse accepted a non-loopback admin listener on the strength of the environment")
		}
	})
}

// ie returns the source of an *InvalidError, or "".
func ie(err error) string {
	var e *InvalidError
	if errors.As(err, &e) {
		return e.Source
	}
	return ""
}

func TestAdminFormat(t *testing.T) {
	t.Parallel()
	a := Admin{TokenFile: "/t", Token: testToken, TLS: TLSFiles{CertFile: "c", KeyFile: "k"}}
	if got, want := a.String(), "{TokenFile:/t Token:[redacted] TLS:{CertFile:c KeyFile:k ClientCAFile:}}"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	want := `config.Admin{TokenFile:"/t", Token:"[redacted]", TLS:config.TLSFiles{CertFile:"c", KeyFile:"k", ClientCAFile:""}}`
	if got := fmt.Sprintf("%#v", a); got != want {
		t.Errorf("%%#v = %s, want %s", got, want)
	}
	if got := (Admin{}).String(); got != "{TokenFile: Token: TLS:{CertFile: KeyFile: ClientCAFile:}}" {
		t.Errorf("zero String = %q", got)
	}
}

func TestAdminSecured(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a    Admin
		want bool
	}{
		{Admin{}, false},
		{Admin{TLS: TLSFiles{CertFile: "c", KeyFile: "k"}}, false},
		{Admin{Token: "t"}, true},
		{Admin{TokenFile: "/t"}, true},
		{Admin{TLS: TLSFiles{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}}, true},
	}
	for _, tt := range tests {
		if got := tt.a.Secured(); got != tt.want {
			t.Errorf("%v.Secured() = %v, want %v", tt.a, got, tt.want)
		}
	}
}

// The Redis ledger's files are read at Load with the same checks as the
// admin token and the listeners' TLS files.
func TestLoadRedisLedgerFiles(t *testing.T) {
	p := writePKI(t)
	absent := filepath.Join(p.dir, "absent")
	yaml := func(pw, cert, key, ca string) string {
		return fmt.Sprintf("ledger: {backend: redis, redis: {address: 127.0.0.1:6379, password_file: %q, tls: {enabled: true, cert_file: %q, key_file: %q, ca_file: %q}}}\n",
			pw, cert, key, ca)
	}
	for _, tt := range []struct {
		name string
		yaml string
		want []string
	}{
		{"every file valid", yaml(p.token, p.cert, p.key, p.ca), nil},
		{"every file missing", yaml(absent, absent, absent, absent), []string{
			"ledger.redis.password_file: file does not exist",
			"ledger.redis.tls.ca_file: file does not exist",
			"ledger.redis.tls.cert_file: file does not exist",
			"ledger.redis.tls.key_file: file does not exist",
		}},
		{"key of another certificate", yaml(p.token, p.cert, p.otherKey, p.ca),
			[]string{"ledger.redis.tls.key_file: is not the private key of ledger.redis.tls.cert_file"}},
		{"CA not PEM", yaml(p.token, p.cert, p.key, p.key), []string{"ledger.redis.tls.ca_file: holds no PEM certificate"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			path := filepath.Join(t.TempDir(), "bulkhead.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path, nil)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			var ie *InvalidError
			if !errors.As(err, &ie) || len(ie.Problems) != len(tt.want) {
				t.Fatalf("Load: %v; want %d problems", err, len(tt.want))
			}
			for _, w := range tt.want {
				if !hasLineWithPrefix(err.Error(), ie.Source+": "+w) {
					t.Errorf("error\n%v\nhas no line starting %q", err, w)
				}
			}
		})
	}
}
