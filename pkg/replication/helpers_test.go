package replication

import (
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/control"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ledgerState stands for the Redis ledger's availability (Strict until
// set).
type ledgerState struct{ s atomic.Int32 }

func (l *ledgerState) get() admission.State  { return admission.State(l.s.Load()) }
func (l *ledgerState) set(s admission.State) { l.s.Store(int32(s)) }

// nopApplier applies nothing.
type nopApplier struct{}

func (nopApplier) ApplyRemote(string, *control.Override) error { return nil }

// applied is an Applier that keeps the overrides it is given, by
// bulkhead (nil: a reset).
type applied struct {
	mu sync.Mutex
	m  map[string]*control.Override
}

func (a *applied) ApplyRemote(name string, ov *control.Override) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]*control.Override{}
	}
	a.m[name] = ov
	return nil
}

func (a *applied) get(name string) (*control.Override, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ov, ok := a.m[name]
	return ov, ok
}
