// Package envoyproctest gives tests a real Envoy: Binary finds it (skipping
// the test, or failing it when BULKHEAD_REQUIRE_ENVOY=1), Start runs one
// that is stopped when the test ends. Its functions are safe for concurrent
// use by parallel tests.
package envoyproctest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
)

// EnvRequire names the environment variable that turns a missing Envoy from
// a skip into a failure (`make test` sets it to 1).
const EnvRequire = "BULKHEAD_REQUIRE_ENVOY"

// stopTimeout bounds the cleanup Stop.
const stopTimeout = 15 * time.Second

// Binary returns the Envoy binary (see envoyproc.FindBinary). Without one it
// fails the test if $BULKHEAD_REQUIRE_ENVOY is "1" and skips it otherwise.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := envoyproc.FindBinary()
	if err == nil {
		return bin
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s=1 but: %v", EnvRequire, err)
	}
	t.Skipf("skipping, no Envoy: %v", err)
	return ""
}

// Start runs Envoy with opts (Binary filled in by Binary if empty; Envoy's
// stderr goes to the test log unless opts.Stderr is set) and stops it in
// t.Cleanup. It fails the test if Envoy does not become ready.
func Start(t testing.TB, opts envoyproc.Options) *envoyproc.Proc {
	t.Helper()
	if opts.Binary == "" {
		opts.Binary = Binary(t)
	}
	if opts.Stderr == nil {
		opts.Stderr = logWriter{t}
	}
	p, err := envoyproc.Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("start envoy: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("stop envoy: %v", err)
		}
	})
	return p
}

// logWriter sends Envoy's stderr to the test log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Logf("envoy: %s", b)
	return len(b), nil
}
