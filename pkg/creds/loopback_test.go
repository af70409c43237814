package creds_test

import (
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9091": true, "127.8.9.10:0": true, "[::1]:9091": true, "localhost:9091": true,
		"[::ffff:127.0.0.1]:1": true, "127.0.0.1": true, "::1": true,
		"0.0.0.0:9091": false, ":9091": false, "[::]:9091": false, "10.0.0.1:9091": false,
		"example.com:9091": false, "[fe80::1%lo]:9091": false, "nonsense": false, "": false,
	} {
		if got := creds.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
