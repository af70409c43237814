package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
)

// port is a fixed demo port and what uses it.
type port struct {
	number int
	owner  string
}

// demoPorts are the contract's fixed demo ports; the daemon's three only
// matter with the embedded config (listen.admin is its default).
var (
	envoyAndUpstreamPorts = []port{
		{10000, "Envoy listener"}, {9901, "Envoy admin"},
		{8081, "catalog upstream"}, {8082, "auth upstream"}, {8083, "orders upstream"},
	}
	daemonPorts = []port{{9001, "bulkhead gRPC"}, {9090, "bulkhead HTTP"}, {9091, "bulkhead admin API"}}
)

// checkPorts reports every fixed port already in use on 127.0.0.1.
func checkPorts(ports []port) error {
	var errs []error
	for _, p := range ports {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.number)))
		if err != nil {
			errs = append(errs, fmt.Errorf("port %d (%s) in use: is another demo, Envoy or bulkhead running? (see: ss -ltnp 'sport = :%d')",
				p.number, p.owner, p.number))
			continue
		}
		_ = ln.Close()
	}
	return errors.Join(errs...)
}

// findBulkhead returns the daemon binary: the flag, else bulkhead next to
// this executable, else bin/bulkhead in the working directory.
func findBulkhead(flagValue string) (string, error) {
	if flagValue != "" {
		if !isExecutable(flagValue) {
			return "", fmt.Errorf("--bulkhead-bin %s: not an executable file", flagValue)
		}
		return filepath.Abs(flagValue)
	}
	var tried []string
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "bulkhead")
		if isExecutable(p) {
			return p, nil
		}
		tried = append(tried, p)
	}
	p := filepath.Join("bin", "bulkhead")
	if isExecutable(p) {
		return filepath.Abs(p)
	}
	tried = append(tried, p)
	return "", fmt.Errorf("bulkhead daemon not found (tried %v): run `make build`", tried)
}

// findEnvoy returns the Envoy binary: the flag, else envoyproc.FindBinary
// ($ENVOY_BIN, .venv/bin/envoy of the module in the working directory, PATH),
// else .venv/bin/envoy beside the bin/ directory of this executable.
func findEnvoy(flagValue string) (string, error) {
	if flagValue != "" {
		if !isExecutable(flagValue) {
			return "", fmt.Errorf("--envoy-bin %s: not an executable file", flagValue)
		}
		return filepath.Abs(flagValue)
	}
	bin, err := envoyproc.FindBinary()
	if err == nil {
		return bin, nil
	}
	if exe, exeErr := os.Executable(); exeErr == nil {
		p := filepath.Join(filepath.Dir(exe), "..", ".venv", "bin", "envoy")
		if isExecutable(p) {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("envoy not found: run `make envoy` (%w)", err)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}
