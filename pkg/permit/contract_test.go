package permit_test

import (
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit/ledgertest"
)

func TestMemoryKeepsTheLedgerContract(t *testing.T) {
	ledgertest.Run(t, func(_ *testing.T, clk *clock.Fake) permit.Ledger { return permit.NewMemory(clk) })
}
