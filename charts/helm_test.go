package charts

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// kubeVersion is the Kubernetes version templates are rendered for.
const kubeVersion = "1.33.0"

// chartDir is the chart's directory.
func chartDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "bulkhead")
}

// findHelm returns the helm binary: $HELM_BIN, the newest .bin/helm-*
// that `make helm` builds, then PATH. Without one the test is skipped, or
// fails when BULKHEAD_REQUIRE_HELM=1.
func findHelm(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HELM_BIN"); p != "" {
		return p
	}
	built, _ := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(chartDir(t))), ".bin", "helm-v*"))
	sort.Strings(built)
	for i := len(built) - 1; i >= 0; i-- {
		if fi, err := os.Stat(built[i]); err == nil && fi.Mode().IsRegular() {
			return built[i]
		}
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if os.Getenv("BULKHEAD_REQUIRE_HELM") == "1" {
		t.Fatal("helm not found ($HELM_BIN, .bin/helm-*, PATH) and BULKHEAD_REQUIRE_HELM=1: run `make helm`")
	}
	t.Skip("helm not found; `make helm` builds it (BULKHEAD_REQUIRE_HELM=1 makes this a failure)")
	return ""
}

// helm runs helm with args and returns its combined output.
func helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, findHelm(t), args...)
	// No user or cluster state: a clean, private helm home.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home,
		"KUBECONFIG="+filepath.Join(home, "none"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// valuesFiles returns the chart's ci/*-values.yaml files, plus "" for the
// defaults.
func valuesFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir(t), "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("only %d values files in ci/", len(files))
	}
	sort.Strings(files)
	return append([]string{""}, files...)
}

func valuesArgs(file string) []string {
	if file == "" {
		return nil
	}
	return []string{"--values", file}
}

func valuesName(file string) string {
	if file == "" {
		return "defaults"
	}
	return filepath.Base(file)
}

// manifest is one rendered document.
type manifest struct {
	Source string // the template, from helm's "# Source:" comment
	Kind   string
	Name   string
	Raw    []byte // YAML
}

// render runs helm template with the values file (release "rel" in
// namespace "mesh") and splits the output into manifests.
func render(t testing.TB, file string, extra ...string) []manifest {
	t.Helper()
	args := append([]string{"template", "rel", chartDir(t), "--namespace", "mesh", "--kube-version", kubeVersion}, valuesArgs(file)...)
	out, err := helm(t, append(args, extra...)...)
	if err != nil {
		t.Fatalf("helm template (%s): %v\n%s", valuesName(file), err, out)
	}
	var ms []manifest
	for _, doc := range strings.Split(out, "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%s: rendered YAML does not parse: %v\n%s", valuesName(file), err, doc)
		}
		if head.Kind == "" {
			continue // comments only
		}
		src := ""
		for _, line := range strings.Split(doc, "\n") {
			if s, ok := strings.CutPrefix(line, "# Source: "); ok {
				src = s
				break
			}
		}
		ms = append(ms, manifest{Source: src, Kind: head.Kind, Name: head.Metadata.Name, Raw: []byte(doc)})
	}
	if len(ms) == 0 {
		t.Fatalf("%s: helm template rendered nothing", valuesName(file))
	}
	return ms
}

// find returns the manifests of kind (and name, if not "").
func find(ms []manifest, kind, name string) []manifest {
	var out []manifest
	for _, m := range ms {
		if m.Kind == kind && (name == "" || m.Name == name) {
			out = append(out, m)
		}
	}
	return out
}

func (m manifest) String() string { return fmt.Sprintf("%s %s (%s)", m.Kind, m.Name, m.Source) }

func TestHelmLint(t *testing.T) {
	for _, f := range valuesFiles(t) {
		t.Run(valuesName(f), func(t *testing.T) {
			args := append([]string{"lint", "--strict", chartDir(t), "--namespace", "mesh", "--kube-version", kubeVersion}, valuesArgs(f)...)
			if out, err := helm(t, args...); err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
		})
	}
}
