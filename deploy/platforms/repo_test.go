package platforms

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// repoRoot is the repository's root directory (this module is deploy/platforms).
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
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

// moduleVersion is the version of a module this module requires, from its
// go.mod (a test binary's build information lists no dependencies).
func moduleVersion(t testing.TB, path string) string {
	t.Helper()
	for _, line := range strings.Split(string(readRepoFile(t, "deploy/platforms/go.mod")), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	t.Fatalf("deploy/platforms/go.mod does not require %s", path)
	return ""
}
