package deploy

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// repoRoot is the repository's root directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Dir(filepath.Dir(file))
}

// readRepoFile reads a file given relative to the repository root.
func readRepoFile(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const (
	dashboardPath = "charts/bulkhead/dashboards/bulkhead.json"
	rulesPath     = "charts/bulkhead/rules/bulkhead.rules.yaml"
)
