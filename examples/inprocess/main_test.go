package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestRun runs the example with short phases: it must finish, leave no
// goroutine behind, and show /order unharmed while catalog is slow.
func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out bytes.Buffer
	if err := run(context.Background(), &out, 200*time.Millisecond); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	found := false
	for _, line := range strings.Split(out.String(), "\n") {
		// "2 catalog slow /order requests ok degraded failed p50 p99"
		if f := strings.Fields(line); len(f) == 10 && f[1] == "catalog" && f[3] == "/order" {
			found = true
			if f[5] != f[4] || f[7] != "0" {
				t.Errorf("/order suffered while catalog was slow: %s", line)
			}
		}
	}
	if !found {
		t.Errorf("no /order line for the slow phase:\n%s", out.String())
	}
	if !strings.Contains(out.String(), `bulkhead_limit{dependency="catalog"} 4`) {
		t.Errorf("metrics missing:\n%s", out.String())
	}
}
