package isolation_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// TestResizeGrow: growing starts workers and queued calls start at once.
func TestResizeGrow(t *testing.T) {
	p := mustPool(t, "dep", bulkhead.Settings{MaxConcurrent: 1, MaxQueue: 4})
	g := newGate()
	var calls []<-chan error
	for range 3 {
		calls = append(calls, async(func() error { return p.Execute(context.Background(), bulkhead.Normal, g.wait) }))
	}
	g.awaitEntered(t, 1)
	testkit.Eventually(t, "two calls queued", func() bool { return p.Snapshot().QueuedTotal() == 2 })
	if err := p.Resize(bulkhead.Settings{MaxConcurrent: 3, MaxQueue: 4}); err != nil {
		t.Fatal(err)
	}
	g.awaitEntered(t, 2) // the queued calls run now, while the first still runs
	if st := p.Stats(); st.Workers != 3 || st.Snapshot.InUse != 3 || st.Snapshot.Settings.MaxConcurrent != 3 {
		t.Fatalf("stats %+v", st)
	}
	g.Open()
	for _, c := range calls {
		if err := recv(t, c); err != nil {
			t.Fatal(err)
		}
	}
}

// TestResizeShrink: shrinking interrupts no call; workers beyond the new
// limit stop as their calls end; a smaller queue sheds.
func TestResizeShrink(t *testing.T) {
	p := mustPool(t, "dep", bulkhead.Settings{MaxConcurrent: 3, MaxQueue: 2})
	g := newGate()
	var running []<-chan error
	for range 3 {
		running = append(running, async(func() error { return p.Execute(context.Background(), bulkhead.Normal, g.wait) }))
	}
	g.awaitEntered(t, 3)
	var queued []<-chan error
	for i := range 2 {
		queued = append(queued, async(func() error {
			return p.Execute(context.Background(), bulkhead.Normal, func(context.Context) error { return nil })
		}))
		testkit.Eventually(t, "queued", func() bool { return p.Snapshot().QueuedTotal() == i+1 })
	}
	if err := p.Resize(bulkhead.Settings{MaxConcurrent: 1, MaxQueue: 1}); err != nil {
		t.Fatal(err)
	}
	// The youngest queued call is shed; the three running calls go on.
	if err := recv(t, queued[1]); !errors.Is(err, bulkhead.ErrShed) {
		t.Fatalf("youngest queued: %v", err)
	}
	if st := p.Stats(); st.Snapshot.InUse != 3 || st.Workers != 3 {
		t.Fatalf("stats after shrink %+v", st)
	}
	g.Open()
	for _, c := range append(running, queued[0]) {
		if err := recv(t, c); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, "surplus workers stopped", func() bool { st := p.Stats(); return st.Workers == 1 && st.Idle == 1 })
}

func TestResizeRefusesInvalid(t *testing.T) {
	p := mustPool(t, "dep", bulkhead.Settings{MaxConcurrent: 2})
	if err := p.Resize(bulkhead.Settings{MaxConcurrent: 0}); !errors.Is(err, bulkhead.ErrInvalidSettings) {
		t.Fatalf("err = %v", err)
	}
	if st := p.Stats(); st.Workers != 2 || p.Settings().MaxConcurrent != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestCloseGraceful: Close lets queued and running calls finish, rejects
// new ones, and returns once every worker has exited.
func TestCloseGraceful(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p, err := isolation.NewPool("dep", bulkhead.Settings{MaxConcurrent: 1, MaxQueue: 2})
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	running := async(func() error { return p.Execute(context.Background(), bulkhead.Normal, g.wait) })
	g.awaitEntered(t, 1)
	queued := async(func() error { return p.Execute(context.Background(), bulkhead.Normal, g.wait) })
	testkit.Eventually(t, "queued", func() bool { return p.Snapshot().QueuedTotal() == 1 })

	closed := async(func() error { return p.Close(context.Background()) })
	testkit.Eventually(t, "closing", func() bool { return p.Snapshot().Closed })
	if err := p.Execute(context.Background(), bulkhead.Normal, g.wait); !errors.Is(err, bulkhead.ErrClosed) {
		t.Fatalf("new call while closing: %v", err)
	}
	if err := p.Resize(bulkhead.Settings{MaxConcurrent: 2}); !errors.Is(err, bulkhead.ErrClosed) {
		t.Fatalf("Resize while closing: %v", err)
	}
	g.Open()
	for _, c := range []<-chan error{running, queued, closed} {
		if err := recv(t, c); err != nil {
			t.Fatal(err)
		}
	}
	if st := p.Stats(); st.Workers != 0 || st.Snapshot.InUse != 0 {
		t.Fatalf("stats after Close %+v", st)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestCloseForced: when Close's context ends first, queued calls are
// rejected, running calls are cancelled, and a later Close waits for them.
func TestCloseForced(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p, err := isolation.NewPool("dep", bulkhead.Settings{MaxConcurrent: 1, MaxQueue: 2})
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	var cause error
	running := async(func() error {
		return p.Execute(context.Background(), bulkhead.Normal, func(ctx context.Context) error {
			err := g.wait(ctx)
			cause = err // read after running returns: done happens before
			return err
		})
	})
	g.awaitEntered(t, 1)
	queued := async(func() error { return p.Execute(context.Background(), bulkhead.Normal, g.wait) })
	testkit.Eventually(t, "queued", func() bool { return p.Snapshot().QueuedTotal() == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close = %v", err)
	}
	if err := recv(t, queued); !errors.Is(err, bulkhead.ErrClosed) {
		t.Fatalf("queued: %v", err)
	}
	if err := recv(t, running); !errors.Is(err, bulkhead.ErrClosed) || !errors.Is(cause, bulkhead.ErrClosed) {
		t.Fatalf("running: %v (cause %v)", err, cause)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestCloseWithAbandonedCall: Close waits for a call whose caller has gone.
func TestCloseWithAbandonedCall(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p, err := isolation.NewPool("dep", bulkhead.Settings{MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	ctx, cancel := context.WithCancel(context.Background())
	res := async(func() error { return p.Execute(ctx, bulkhead.Normal, g.waitIgnoringCtx) })
	g.awaitEntered(t, 1)
	cancel()
	if err := recv(t, res); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	closed := async(func() error { return p.Close(context.Background()) })
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while a call still ran", err)
	default:
	}
	g.Open()
	if err := recv(t, closed); err != nil {
		t.Fatal(err)
	}
}
