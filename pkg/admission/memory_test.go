package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/admission/admissiontest"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

func TestMemoryContract(t *testing.T) {
	admissiontest.Run(t, func(t *testing.T, bulkheads map[string]bulkhead.Settings) admissiontest.Backend {
		reg := bulkhead.NewRegistry()
		if _, err := reg.Apply(bulkheads); err != nil {
			t.Fatal(err)
		}
		leases := permit.NewMemory(clock.Real{}, permit.WithSweepInterval(20*time.Millisecond))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = leases.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done; leases.Close(permit.Shutdown) })
		return admissiontest.Backend{Ledger: admission.NewMemory(reg, leases, admissiontest.Heartbeat), Bulkheads: reg}
	})
}
