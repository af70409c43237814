package admin_test

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/admin/admintest"
	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

const secret = "s3cret-token-for-tests"

// tokenID is the first 8 hex digits of sha256(secret).
var tokenID = func() string { s := sha256.Sum256([]byte(secret)); return hex.EncodeToString(s[:4]) }()

func TestTokenAuth(t *testing.T) {
	auth, err := admin.NewAuthenticator(admin.WithToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, auth)
	addr := admintest.Start(t, f.srv)
	c := dial(t, addr)
	tests := []struct {
		name, header string
		code         codes.Code
		http         int
	}{
		{"missing", "", codes.Unauthenticated, 401},
		{"wrong", "Bearer nope", codes.Unauthenticated, 401},
		{"wrong scheme", "Basic " + secret, codes.Unauthenticated, 401},
		{"right", "Bearer " + secret, codes.OK, 200},
		{"right, lower-case scheme", "bearer " + secret, codes.OK, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			var hdr map[string]string
			if tc.header != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", tc.header)
				hdr = map[string]string{"Authorization": tc.header}
			}
			_, err := c.UpdateBulkhead(ctx, &adminv1.UpdateBulkheadRequest{Name: "catalog", MaxQueue: proto.Int32(3)})
			if status.Code(err) != tc.code {
				t.Errorf("gRPC: %v, want %v", err, tc.code)
			}
			s, err := c.WatchBulkheads(ctx, &adminv1.WatchBulkheadsRequest{})
			if err == nil {
				_, err = s.Recv()
			}
			if status.Code(err) != tc.code {
				t.Errorf("gRPC watch: %v, want %v", err, tc.code)
			}
			r := do(t, http.DefaultClient, "PATCH", "http://"+addr+"/v1/bulkheads/catalog", `{"max_queue": 3}`, hdr)
			if r.code != tc.http {
				t.Errorf("HTTP: %d %s, want %d", r.code, r.raw, tc.http)
			}
		})
	}
	http.DefaultClient.CloseIdleConnections()
	// Four accepted updates, each by the token's id, never the token.
	calls := f.fake.Calls()
	if len(calls) != 4 {
		t.Fatalf("calls %q", calls)
	}
	for _, c := range calls {
		if !strings.HasPrefix(c, "update catalog by token:"+tokenID+" from 127.0.0.1:") {
			t.Errorf("call %q", c)
		}
		if strings.Contains(c, secret) {
			t.Errorf("the token leaked into %q", c)
		}
	}
	logs := f.logs.String()
	if !strings.Contains(logs, "code=Unauthenticated") || !strings.Contains(logs, "remote=127.0.0.1:") {
		t.Errorf("refusals not logged:\n%s", logs)
	}
	if strings.Contains(logs, secret) {
		t.Errorf("the token leaked into the log")
	}
}

func TestTokenFileReread(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := admin.NewAuthenticator(admin.WithTokenFile(path))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, auth)
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	get := func(tok string) int {
		return do(t, ts.Client(), "GET", ts.URL+"/v1/bulkheads", "", map[string]string{"Authorization": "Bearer " + tok}).code
	}
	if c := get("first-token"); c != 200 {
		t.Fatalf("first token: %d", c)
	}
	// A new file swapped in (as a Secret update does), with a new mtime.
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte("second-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(tmp, later, later); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if c := get("first-token"); c != 401 {
		t.Errorf("old token after the swap: %d, want 401", c)
	}
	if c := get("second-token"); c != 200 {
		t.Errorf("new token: %d, want 200", c)
	}
}

func TestAuthenticatorErrors(t *testing.T) {
	dir := t.TempDir()
	empty := testkit.WriteFile(t, dir, "empty", []byte(" \n"))
	for name, opt := range map[string]admin.AuthOption{
		"empty token":      admin.WithToken("  "),
		"empty token file": admin.WithTokenFile(empty),
		"no token file":    admin.WithTokenFile(filepath.Join(dir, "missing")),
	} {
		if _, err := admin.NewAuthenticator(opt); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := admin.NewAuthenticator(admin.WithToken("  ")); !errors.Is(err, admin.ErrEmptyToken) {
		t.Errorf("empty token: %v, want ErrEmptyToken", err)
	}
}

func TestMTLS(t *testing.T) {
	ca, other := testkit.NewCA(t, "admin-ca"), testkit.NewCA(t, "other-ca")
	dir := t.TempDir()
	scert, skey := ca.Issue(t, "bulkhead", true)
	tlsFiles, err := creds.NewTLS("admin", creds.Files{
		CertFile:     testkit.WriteFile(t, dir, "s.crt", scert),
		KeyFile:      testkit.WriteFile(t, dir, "s.key", skey),
		ClientCAFile: testkit.WriteFile(t, dir, "ca.crt", ca.PEM),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CheckListen("0.0.0.0:9091", mustAuth(t), tlsFiles); err != nil {
		t.Errorf("CheckListen with mTLS: %v", err)
	}
	f := newFixture(t, mustAuth(t))
	addr := admintest.StartTLS(t, f.srv, tlsFiles)

	ccert, ckey := ca.Issue(t, "alice", false)
	c := dial(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(ca.ClientTLS(t, ccert, ckey))))
	up, err := c.UpdateBulkhead(testCtx(t), &adminv1.UpdateBulkheadRequest{Name: "auth", MaxConcurrent: proto.Int32(2)})
	if err != nil {
		t.Fatalf("gRPC with a client certificate: %v", err)
	}
	if a := up.GetBulkhead().GetOverride().GetActor(); !strings.HasPrefix(a, "cert:alice from 127.0.0.1:") {
		t.Errorf("actor %q", a)
	}

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientTLS(t, ccert, ckey)}}
	defer hc.CloseIdleConnections()
	if r := do(t, hc, "GET", "https://"+addr+"/v1/bulkheads/auth", "", nil); r.code != 200 {
		t.Errorf("JSON with a client certificate: %d %s", r.code, r.raw)
	}

	ocert, okey := other.Issue(t, "mallory", false)
	for name, cfg := range map[string]*tls.Config{
		"no client certificate":            ca.ClientTLS(t, nil, nil),
		"certificate of another authority": ca.ClientTLS(t, ocert, okey),
	} {
		c := dial(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		_, err := c.ListBulkheads(testCtx(t), &adminv1.ListBulkheadsRequest{})
		if status.Code(err) != codes.Unavailable { // the handshake fails
			t.Errorf("%s: %v, want a failed handshake", name, err)
		}
	}
}

func mustAuth(t *testing.T, opts ...admin.AuthOption) *admin.Authenticator {
	t.Helper()
	a, err := admin.NewAuthenticator(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestCheckListen(t *testing.T) {
	token := mustAuth(t, admin.WithToken("x"))
	none := mustAuth(t)
	ca, dir := testkit.NewCA(t, "ca"), t.TempDir()
	c, k := ca.Issue(t, "s", true)
	files := creds.Files{CertFile: testkit.WriteFile(t, dir, "s.crt", c), KeyFile: testkit.WriteFile(t, dir, "s.key", k)}
	plainTLS, err := creds.NewTLS("admin", files)
	if err != nil {
		t.Fatal(err)
	}
	files.ClientCAFile = testkit.WriteFile(t, dir, "ca.crt", ca.PEM)
	mutualTLS, err := creds.NewTLS("admin", files)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr string
		auth *admin.Authenticator
		tls  *creds.TLS
		ok   bool
	}{
		{"127.0.0.1:9091", none, nil, true},
		{"127.1.2.3:9091", none, nil, true},
		{"[::1]:9091", none, nil, true},
		{"localhost:9091", none, nil, true},
		{"0.0.0.0:9091", none, nil, false},
		{":9091", none, nil, false},
		{"10.0.0.7:9091", none, nil, false},
		{"[::]:9091", none, nil, false},
		{"admin.example:9091", none, nil, false},
		{"10.0.0.7:9091", none, plainTLS, false}, // TLS without client certificates
		{"10.0.0.7:9091", none, mutualTLS, true},
		{"0.0.0.0:9091", token, nil, true},
		{"0.0.0.0:9091", nil, nil, false},
		{"no-port", none, nil, false},
	}
	for _, tc := range tests {
		err := admin.CheckListen(tc.addr, tc.auth, tc.tls)
		if (err == nil) != tc.ok {
			t.Errorf("CheckListen(%q): %v, want ok=%v", tc.addr, err, tc.ok)
		}
		if err != nil && tc.addr != "no-port" {
			if !errors.Is(err, admin.ErrInsecureListen) {
				t.Errorf("CheckListen(%q): %v does not wrap ErrInsecureListen", tc.addr, err)
			}
			for _, field := range []string{"listen.admin", "admin.token_file", "admin.tls.client_ca_file"} {
				if !strings.Contains(err.Error(), field) {
					t.Errorf("CheckListen(%q): %q does not name %s", tc.addr, err, field)
				}
			}
		}
	}
}
