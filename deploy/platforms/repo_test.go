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

// moduleVersion is the version of a module that a go.mod of the
// repository (rel) requires.
func moduleVersion(t testing.TB, gomod, path string) string {
	t.Helper()
	for _, line := range strings.Split(string(readRepoFile(t, gomod)), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	t.Fatalf("%s does not require %s", gomod, path)
	return ""
}

// kubeVersion is the Kubernetes release the API server of the tests is
// built from (make kube-server), and the one the chart is rendered for.
func kubeVersion(t testing.TB) string {
	t.Helper()
	return moduleVersion(t, "deploy/platforms/kubeserver/go.mod", "k8s.io/kubernetes")
}
