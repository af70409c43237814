package deploy

import (
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// goreleaserConfig is the part of .goreleaser.yaml the tests read.
type goreleaserConfig struct {
	Builds []struct {
		ID      string   `yaml:"id"`
		Main    string   `yaml:"main"`
		Binary  string   `yaml:"binary"`
		Env     []string `yaml:"env"`
		Goos    []string `yaml:"goos"`
		Goarch  []string `yaml:"goarch"`
		Flags   []string `yaml:"flags"`
		Ldflags []string `yaml:"ldflags"`
	} `yaml:"builds"`
	Archives []struct {
		IDs []string `yaml:"ids"`
	} `yaml:"archives"`
}

// The release archives hold the three programs for linux and darwin on
// amd64 and arm64, built as the Dockerfile builds them: the same flags and
// the same ldflags, the template's version and commit where the Dockerfile
// has its build arguments. So `--version` reads alike in both, and a
// release's linux binaries are the image's.
func TestReleaseStampsAgree(t *testing.T) {
	var cfg goreleaserConfig
	if err := yaml.Unmarshal(readRepoFile(t, ".goreleaser.yaml"), &cfg); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	docker := dockerLdflags(t)
	var ids []string
	for _, b := range cfg.Builds {
		ids = append(ids, b.ID)
		if b.Main != "./cmd/"+b.ID || b.Binary != b.ID {
			t.Errorf("build %s: main %q, binary %q; want ./cmd/%[1]s and %[1]s", b.ID, b.Main, b.Binary)
		}
		if !slices.Equal(b.Goos, []string{"linux", "darwin"}) || !slices.Equal(b.Goarch, []string{"amd64", "arm64"}) {
			t.Errorf("build %s: goos %q goarch %q", b.ID, b.Goos, b.Goarch)
		}
		if !slices.Contains(b.Env, "CGO_ENABLED=0") || !slices.Contains(b.Flags, "-trimpath") || !slices.Contains(b.Flags, "-buildvcs=false") {
			t.Errorf("build %s: env %q, flags %q; want CGO_ENABLED=0, -trimpath, -buildvcs=false", b.ID, b.Env, b.Flags)
		}
		stamps := strings.NewReplacer("v{{ .Version }}", "${VERSION}", "{{ .FullCommit }}", "${REVISION}").
			Replace(strings.Join(b.Ldflags, " "))
		if stamps != docker {
			t.Errorf("build %s: ldflags (templates as build args)\n%s\nthe Dockerfile's\n%s", b.ID, stamps, docker)
		}
	}
	if want := []string{"bulkhead", "bulkheadctl", "bulkhead-demo"}; !slices.Equal(ids, want) {
		t.Errorf("builds %q, want %q", ids, want)
	}
	if len(cfg.Archives) != 1 || !slices.Equal(cfg.Archives[0].IDs, ids) {
		t.Errorf("archives %+v: want one archive per platform of every build", cfg.Archives)
	}
}

// dockerLdflags is the -ldflags value of the Dockerfile's go build lines,
// their build arguments unexpanded; every line must have the same.
func dockerLdflags(t *testing.T) string {
	t.Helper()
	var all []string
	for _, in := range parseDockerfile(t, string(readRepoFile(t, "Dockerfile"))) {
		if in.Cmd != "RUN" || !strings.Contains(in.Args, "go build") {
			continue
		}
		var ldflags string
		for _, w := range shellWords(in.Args) {
			if v, ok := strings.CutPrefix(w, "-ldflags="); ok {
				ldflags = v
			}
		}
		all = append(all, ldflags)
	}
	if len(all) == 0 || all[0] == "" || slices.ContainsFunc(all, func(l string) bool { return l != all[0] }) {
		t.Fatalf("the Dockerfile's go build lines have -ldflags %q: want one value, the same on every line", all)
	}
	return all[0]
}
