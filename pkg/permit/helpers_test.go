package permit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// countingPermit counts its releases; the ledger must release it once.
type countingPermit struct{ n atomic.Int32 }

func (p *countingPermit) Release() bool { return p.n.Add(1) == 1 }
func (p *countingPermit) count() int    { return int(p.n.Load()) }

// ending is one Observer.Ended call.
type ending struct {
	lease Lease
	src   Source
	at    time.Time
}

// recorder is an Observer that records what it is told and signals each end.
type recorder struct {
	mu      sync.Mutex
	ends    []ending
	ignored map[Result]int
	endedC  chan Lease // buffered; receives every ended lease if not full
}

func newRecorder(buf int) *recorder {
	return &recorder{ignored: map[Result]int{}, endedC: make(chan Lease, buf)}
}

func (r *recorder) Ended(l Lease, src Source, at time.Time) {
	r.mu.Lock()
	r.ends = append(r.ends, ending{l, src, at})
	r.mu.Unlock()
	select {
	case r.endedC <- l:
	default:
	}
}

func (r *recorder) Ignored(_ Source, res Result) {
	r.mu.Lock()
	r.ignored[res]++
	r.mu.Unlock()
}

func (r *recorder) endings() []ending {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ending(nil), r.ends...)
}

func (r *recorder) ignoredCount(res Result) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ignored[res]
}

var _ Observer = (*recorder)(nil)

// grant registers a fresh counting permit and fails the test on error.
func grant(t testing.TB, l *Memory, g Grant) (string, *countingPermit) {
	t.Helper()
	p := &countingPermit{}
	tok, err := l.Grant(p, g)
	if err != nil {
		t.Fatalf("Grant(%+v): %v", g, err)
	}
	return tok, p
}

func newFakeLedger(opts ...Option) (*Memory, *clock.Fake) {
	clk := clock.NewFake(t0)
	return NewMemory(clk, opts...), clk
}
