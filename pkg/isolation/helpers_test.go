package isolation_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gate blocks calls until opened; entered receives once per call that
// reached it, so a test knows a call is running without sleeping.
type gate struct {
	open    chan struct{}
	entered chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{open: make(chan struct{}), entered: make(chan struct{}, 1024)} }

func (g *gate) Open() { g.once.Do(func() { close(g.open) }) }

// wait blocks until the gate opens or ctx ends (honours cancellation).
func (g *gate) wait(ctx context.Context) error {
	g.entered <- struct{}{}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// waitIgnoringCtx blocks until the gate opens, whatever ctx says.
func (g *gate) waitIgnoringCtx(context.Context) error {
	g.entered <- struct{}{}
	<-g.open
	return nil
}

// awaitEntered waits for n calls to reach the gate.
func (g *gate) awaitEntered(t testing.TB, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-g.entered:
		case <-timeout:
			t.Fatalf("calls did not reach the gate")
		}
	}
}

func mustLimiter(t testing.TB, name string, s bulkhead.Settings) *bulkhead.Limiter {
	t.Helper()
	l, err := bulkhead.New(name, s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustPool(t testing.TB, name string, s bulkhead.Settings, opts ...isolation.PoolOption) *isolation.Pool {
	t.Helper()
	p, err := isolation.NewPool(name, s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// strategies builds one bulkhead of each kind with the same settings.
func strategies(t *testing.T, s bulkhead.Settings) map[string]isolation.Bulkhead {
	return map[string]isolation.Bulkhead{
		"semaphore": isolation.NewSemaphore(mustLimiter(t, "dep", s)),
		"pool":      mustPool(t, "dep", s),
	}
}

// async runs f on a goroutine and returns a channel with its error.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func recv(t testing.TB, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("call did not return")
		return nil
	}
}

// countingObserver counts observer calls.
type countingObserver struct {
	mu                         sync.Mutex
	admitted, finished, failed map[string]int
}

func newCountingObserver() *countingObserver {
	return &countingObserver{admitted: map[string]int{}, finished: map[string]int{}, failed: map[string]int{}}
}

func (o *countingObserver) Admitted(dep string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.admitted[dep]++
}

func (o *countingObserver) Finished(dep string, _ time.Duration, failed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished[dep]++
	if failed {
		o.failed[dep]++
	}
}

func (o *countingObserver) counts(dep string) (admitted, finished, failed int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.admitted[dep], o.finished[dep], o.failed[dep]
}
