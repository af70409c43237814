package bulkhead

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mustNew(t testing.TB, s Settings, opts ...Option) *Limiter {
	t.Helper()
	l, err := New("test", s, opts...)
	if err != nil {
		t.Fatalf("New(%+v): %v", s, err)
	}
	return l
}

// enqueue runs the decision step of Acquire synchronously, so tests can
// build an exact queue without goroutines.
func enqueue(l *Limiter, p Priority) (*waiter, Permit, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.enqueueLocked(p, false)
}

func isDecided(w *waiter) bool {
	select {
	case <-w.ready:
		return true
	default:
		return false
	}
}

type acquireResult struct {
	p   Permit
	err error
}

// acquireAsync starts Acquire in a goroutine and waits (polling the
// snapshot, with a deadline) until it has queued or returned.
func acquireAsync(t *testing.T, ctx context.Context, l *Limiter, p Priority) <-chan acquireResult {
	t.Helper()
	before := l.Snapshot()
	ch := make(chan acquireResult, 1)
	go func() {
		pm, err := l.Acquire(ctx, p)
		ch <- acquireResult{pm, err}
	}()
	testkit.Eventually(t, "the condition", func() bool {
		s := l.Snapshot()
		return len(ch) == 1 || s.QueuedTotal() > before.QueuedTotal() ||
			s.Rejected[ReasonShed] > before.Rejected[ReasonShed]
	})
	return ch
}

func recv(t *testing.T, ch <-chan acquireResult) acquireResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire did not return within 5s")
		return acquireResult{}
	}
}
