package testkit_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const importPath = "github.com/bulkhead-mesh/bulkhead/pkg/testkit"

// Only tests import testkit: no file of the module that is not a _test.go
// file (testkit's own aside) names it.
func TestOnlyTestsImportTestkit(t *testing.T) {
	root := filepath.Join("..", "..")
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if abs, _ := filepath.Abs(path); abs == self ||
				(path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor" || d.Name() == "testdata")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == importPath {
				t.Errorf("%s imports testkit, which is for tests only", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: is %s the module root?", checked, root)
	}
}

func TestCAIssue(t *testing.T) {
	ca := testkit.NewCA(t, "test CA")
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	parse := func(certPEM []byte) *x509.Certificate {
		t.Helper()
		block, _ := pem.Decode(certPEM)
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	srvPEM, _ := ca.Issue(t, "bulkhead", true)
	srv := parse(srvPEM)
	for _, name := range []string{testkit.ServerName, "localhost", "127.0.0.1"} {
		if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	cliPEM, _ := ca.Issue(t, "alice", false)
	cli := parse(cliPEM)
	if _, err := cli.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || cli.Subject.CommonName != "alice" {
		t.Errorf("client certificate %q: %v", cli.Subject.CommonName, err)
	}
	if testkit.Serial(t, srvPEM).Cmp(testkit.Serial(t, cliPEM)) == 0 {
		t.Error("two certificates share a serial")
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: x509.NewCertPool(), DNSName: "localhost"}); err == nil {
		t.Error("a server certificate verified without its CA")
	}
}

func TestSyncBuffer(t *testing.T) {
	var b testkit.SyncBuffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := len(b.String()); n != 400 {
		t.Fatalf("%d bytes, want 400", n)
	}
}

func TestServeBufconn(t *testing.T) {
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	conn := testkit.ServeBufconn(t, gs).Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check = %v, %v", resp, err)
	}
}
