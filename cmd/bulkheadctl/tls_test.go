package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/admin/admintest"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestMTLS(t *testing.T) {
	ca := testkit.NewCA(t, "admin-ca")
	dir := t.TempDir()
	scert, skey := ca.Issue(t, "bulkhead", true)
	ccert, ckey := ca.Issue(t, "alice", false)
	caFile := testkit.WriteFile(t, dir, "ca.crt", ca.PEM)
	certFile, keyFile := testkit.WriteFile(t, dir, "c.crt", ccert), testkit.WriteFile(t, dir, "c.key", ckey)
	tlsFiles, err := creds.NewTLS("admin", creds.Files{
		CertFile: testkit.WriteFile(t, dir, "s.crt", scert), KeyFile: testkit.WriteFile(t, dir, "s.key", skey), ClientCAFile: caFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	auth, _ := admin.NewAuthenticator()
	fake := admintest.NewFake(time.Now, map[string]bulkhead.Settings{"auth": {MaxConcurrent: 1}})
	srv := admin.New(fake, auth, admintest.Logger())
	addr := admintest.StartTLS(t, srv, tlsFiles)

	tests := []struct {
		name  string
		args  []string
		code  int
		inErr string
	}{
		{"mTLS", []string{"--ca-file", caFile, "--cert-file", certFile, "--key-file", keyFile}, 0, ""},
		{"no client certificate", []string{"--ca-file", caFile}, 3, "cannot connect to the admin API at " + addr},
		{"server not trusted", []string{"--tls", "--cert-file", certFile, "--key-file", keyFile}, 3, "check --tls, --ca-file, --cert-file and --key-file"},
		{"cleartext to a TLS server", nil, 3, "does the admin listener use TLS (then add --tls) or not (then drop it)?"},
		{"key without cert", []string{"--ca-file", caFile, "--key-file", keyFile}, 2, "--cert-file and --key-file go together"},
	}
	for _, tc := range tests {
		args := append([]string{"--addr", addr, "set", "auth", "--max-queue", "2"}, tc.args...)
		r := start(context.Background(), nil, false, args...).wait(t)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.inErr) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.name, r.code, r.stderr, tc.code, tc.inErr)
		}
	}
	if calls := fake.Calls(); len(calls) != 1 || !strings.HasPrefix(calls[0], "update auth by cert:alice from 127.0.0.1:") {
		t.Errorf("calls %q", calls)
	}
}
