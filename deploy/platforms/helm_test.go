package platforms

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// chartDir is the chart's directory, in the repository.
func chartDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(repoRoot(t), "charts", "bulkhead")
}

// findTool returns the newest .bin/<prefix>* that the Makefile built, or
// the program named in the environment variable env, or on PATH. Without
// one the test is skipped, or fails when the variable require is "1" (as
// in `make test`); hint says how to build it.
func findTool(t testing.TB, env, prefix, require, hint string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	built, _ := filepath.Glob(filepath.Join(repoRoot(t), ".bin", prefix+"*"))
	sort.Strings(built)
	for i := len(built) - 1; i >= 0; i-- {
		if fi, err := os.Stat(built[i]); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return built[i]
		}
	}
	if p, err := exec.LookPath(strings.TrimSuffix(prefix, "-")); err == nil {
		return p
	}
	if os.Getenv(require) == "1" {
		t.Fatalf("%s not found ($%s, .bin/%s*, PATH) and %s=1: %s", strings.TrimSuffix(prefix, "-"), env, prefix, require, hint)
	}
	t.Skipf("%s not found ($%s, .bin/%s*, PATH): %s (%s=1 makes this a failure)", strings.TrimSuffix(prefix, "-"), env, prefix, hint, require)
	return ""
}

// findHelm returns the helm binary that `make helm` builds.
func findHelm(t testing.TB) string {
	t.Helper()
	return findTool(t, "HELM_BIN", "helm-", "BULKHEAD_REQUIRE_HELM", "run `make helm`")
}

// helm runs helm with a private, empty helm home and the given
// kubeconfig ("" for none), and returns its combined output.
func helm(t testing.TB, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, findHelm(t), args...)
	home := t.TempDir()
	if kubeconfig == "" {
		kubeconfig = filepath.Join(home, "none")
	}
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home,
		"KUBECONFIG="+kubeconfig)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// manifest is one rendered document.
type manifest struct {
	Source     string // the template, from helm's "# Source:" comment
	APIVersion string
	Kind       string
	Name       string
	Raw        []byte // YAML
}

func (m manifest) String() string { return m.Kind + " " + m.Name + " (" + m.Source + ")" }

// valuesFile is a file of the chart's ci/ directory.
func valuesFile(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(chartDir(t), "ci", name)
}

// render runs helm template (release "rel", namespace "mesh", for the
// Kubernetes of kubeVersion) with the values files and splits its output into manifests.
func render(t testing.TB, values ...string) []manifest {
	t.Helper()
	args := []string{"template", "rel", chartDir(t), "--namespace", "mesh", "--kube-version", kubeVersion(t)}
	for _, v := range values {
		args = append(args, "--values", v)
	}
	out, err := helm(t, "", args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	ms := splitManifests(t, out)
	if len(ms) == 0 {
		t.Fatalf("helm template %v rendered nothing", values)
	}
	return ms
}

// splitManifests splits a multi-document YAML stream, skipping documents
// that hold only comments.
func splitManifests(t testing.TB, out string) []manifest {
	t.Helper()
	var ms []manifest
	for _, doc := range strings.Split(out, "\n---") {
		// Each document ends with its line break (a block scalar at the end
		// keeps its newline).
		doc += "\n"
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		if head.Kind == "" {
			continue
		}
		src := ""
		for _, line := range strings.Split(doc, "\n") {
			if s, ok := strings.CutPrefix(line, "# Source: "); ok {
				src = s
				break
			}
		}
		ms = append(ms, manifest{Source: src, APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name, Raw: []byte(doc)})
	}
	return ms
}
