package platforms

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// buildBulkhead builds cmd/bulkhead from the repository (its own module).
func buildBulkhead(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bulkhead")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/bulkhead")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/bulkhead: %v\n%s", err, out)
	}
	return bin
}

// mountedFileRE matches the files the configuration names under
// /var/run/bulkhead/, where the chart mounts Secrets into the pod.
var mountedFileRE = regexp.MustCompile(`/var/run/bulkhead/[^\s"']+`)

// stageMountedFiles stands in for the pod's mounted Secrets, which the
// daemon checks exist: each file the configuration names under
// /var/run/bulkhead/ is made under a temporary root (a PEM certificate for
// a .crt or .pem file, a private key for a .key file, a password
// otherwise), and the configuration returned names them there.
// (charts/ledger_test.go checks that the Deployment mounts a Secret at
// each of those paths.)
func stageMountedFiles(t *testing.T, cfg string) string {
	t.Helper()
	files := mountedFileRE.FindAllString(cfg, -1)
	if len(files) == 0 {
		return cfg
	}
	root := t.TempDir()
	p := newPKI(t, t.TempDir())
	for _, f := range files {
		path := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		content := []byte("secret\n")
		switch filepath.Ext(f) {
		case ".crt", ".pem":
			content = readFile(t, p.caCert)
		case ".key":
			content = readFile(t, p.adminKey)
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return strings.ReplaceAll(cfg, "/var/run/bulkhead/", filepath.Join(root, "var", "run", "bulkhead")+"/")
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkConfig runs `bulkhead --check-config` on a configuration (its
// mounted files staged) and returns its exit code and output.
func checkConfig(t *testing.T, bulkhead, cfg string) (int, string) {
	t.Helper()
	cfg = stageMountedFiles(t, cfg)
	path := filepath.Join(t.TempDir(), "bulkhead.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bulkhead, "--config", path, "--check-config").CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, strings.TrimSpace(string(out))
	case errors.As(err, &exit):
		return exit.ExitCode(), strings.TrimSpace(string(out))
	default:
		t.Fatalf("bulkhead --check-config: %v", err)
		return 0, ""
	}
}
