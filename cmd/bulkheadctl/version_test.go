package main

import (
	"context"
	"strings"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/version"
)

// --version needs no server: it prints the build's version line to stdout.
func TestVersion(t *testing.T) {
	want := version.String("bulkheadctl") + "\n"
	for _, args := range [][]string{{"--version"}, {"--addr", "127.0.0.1:1", "--version"}, {"--version", "status"}} {
		r := start(context.Background(), nil, false, args...).wait(t)
		check(t, strings.Join(args, " "), r, 0, want, "")
	}
	// Help wins over --version, as it lists it.
	r := start(context.Background(), nil, false, "--help", "--version").wait(t)
	if r.code != 0 || !strings.Contains(r.stdout, "--version") || !strings.Contains(r.stdout, "Commands:") {
		t.Errorf("--help --version: %+v", r)
	}
}
