package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// adminYAML is a config whose admin listener serves mutual TLS from p's
// files (the gRPC listener is plain).
func (p *pkiFiles) adminYAML() string {
	return fmt.Sprintf(`listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
admin:
  tls: {cert_file: %q, key_file: %q, client_ca_file: %q}
bulkheads:
  catalog: {max_concurrent: 2}
`, p.cert, p.key, p.clientCA)
}

// The admin listener follows admin.tls as the gRPC listener follows
// listen.grpc_tls: rotated files serve the next connection without a
// restart, a change that does not load keeps the last good certificate and
// is counted once, and the reloads have their own series.
func TestAdminTLSReload(t *testing.T) {
	p := writeServerPKI(t)
	rn := start(t, parseConfig(t, p.adminYAML()), withTLSCheckInterval(5*time.Millisecond))
	addr := rn.addrs["admin"]
	client := p.serverCA.ClientTLS(t, p.envoyCert, p.envoyKey)
	first, err := testkit.ServedSerial(addr, client)
	if err != nil {
		t.Fatal(err)
	}
	listBulkheads := func() int {
		t.Helper()
		cfg := client.Clone()
		cfg.NextProtos = nil
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
		resp, err := hc.Get("https://" + addr + "/v1/bulkheads")
		if err != nil {
			t.Fatalf("admin API over TLS: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := listBulkheads(); code != http.StatusOK {
		t.Fatalf("admin API over mTLS: %d", code)
	}

	// Renamed over, key first: the mismatched pair in between is not served.
	cert2, key2 := p.serverCA.Issue(t, "bulkhead", true)
	testkit.Replace(t, p.key, key2)
	if got, err := testkit.ServedSerial(addr, client); err != nil || got.Cmp(first) != 0 {
		t.Fatalf("mid-rotation: serial %v, %v; want the old %v", got, err, first)
	}
	testkit.Replace(t, p.cert, cert2)
	testkit.WaitServedSerial(t, "the rotated admin certificate served", addr, client, testkit.Serial(t, cert2))
	if code := listBulkheads(); code != http.StatusOK {
		t.Fatalf("admin API after the rotation: %d", code)
	}

	// A broken certificate keeps the last good one, counted once.
	failuresBefore := counter(t, rn, "bulkhead_admin_tls_reloads_total", "failure")
	testkit.Replace(t, p.cert, []byte("not a certificate"))
	brokenCountedOnce(t, rn, "bulkhead_admin_tls_reloads_total", addr, client, testkit.Serial(t, cert2), failuresBefore)
	cert3, key3 := p.serverCA.Issue(t, "bulkhead", true)
	testkit.Replace(t, p.key, key3)
	testkit.Replace(t, p.cert, cert3)
	testkit.WaitServedSerial(t, "a good certificate after a broken one", addr, client, testkit.Serial(t, cert3))

	if got := counter(t, rn, "bulkhead_admin_tls_reloads_total", "success"); got < 3 {
		t.Errorf("admin reloads{success} = %v, want at least 3 (start, two rotations)", got)
	}
	_, body := rn.get(t, "/metrics")
	if !strings.Contains(body, "bulkhead_admin_tls_not_after_timestamp_seconds") {
		t.Error("no bulkhead_admin_tls_not_after_timestamp_seconds")
	}
	if strings.Contains(body, "bulkhead_grpc_tls_") {
		t.Error("a plain gRPC listener exports TLS series")
	}
}

func TestAdminTLSUnusableAtStart(t *testing.T) {
	p := writeServerPKI(t)
	_, key := p.serverCA.Issue(t, "bulkhead", true)
	testkit.Replace(t, p.key, key) // a key, but not the certificate's
	_, err := New(parseConfig(t, p.adminYAML()), slogDiscard())
	if err == nil || !strings.Contains(err.Error(), "admin.tls: ") || !strings.Contains(err.Error(), p.key) ||
		!strings.Contains(err.Error(), "private key does not match public key") {
		t.Fatalf("New = %v, want an error naming admin.tls, the key file and the mismatch", err)
	}
}
