package isolation_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

var errBoom = errors.New("boom")

func fallbackTo(v string, got *error) func(context.Context, error) (string, error) {
	return func(_ context.Context, err error) (string, error) {
		*got = err
		return v, nil
	}
}

// TestDoOutcomes: results, call errors, panics and fallbacks, for both
// strategies.
func TestDoOutcomes(t *testing.T) {
	tests := []struct {
		name         string
		call         func(context.Context) (string, error)
		withFallback bool
		want         string
		wantErr      error // errors.Is
		wantFallback error // errors.Is; nil = the fallback must not run
	}{
		{name: "value", call: func(context.Context) (string, error) { return "ok", nil }, withFallback: true, want: "ok"},
		{name: "call error is returned, no fallback", call: func(context.Context) (string, error) { return "partial", errBoom },
			withFallback: true, want: "partial", wantErr: errBoom},
		{name: "panic goes to the fallback", call: func(context.Context) (string, error) { panic(errBoom) },
			withFallback: true, want: "fallback", wantFallback: isolation.ErrPanic},
		{name: "panic without fallback", call: func(context.Context) (string, error) { panic("kaput") },
			wantErr: isolation.ErrPanic},
		{name: "panic value error is visible", call: func(context.Context) (string, error) { panic(errBoom) },
			wantErr: errBoom},
	}
	for _, tt := range tests {
		for kind, b := range strategies(t, bulkhead.Settings{MaxConcurrent: 1}) {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				var fbErr error
				var fb func(context.Context, error) (string, error)
				if tt.withFallback {
					fb = fallbackTo("fallback", &fbErr)
				}
				got, err := isolation.Do(context.Background(), b, tt.call, fb, bulkhead.Normal)
				if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
					t.Fatalf("Do = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
				}
				if !errors.Is(fbErr, tt.wantFallback) || (tt.wantFallback == nil && fbErr != nil) {
					t.Fatalf("fallback got %v, want %v", fbErr, tt.wantFallback)
				}
				// Whatever happened, the permit is back and the bulkhead works.
				testkit.Eventually(t, "the permit is back", func() bool { return b.Snapshot().InUse == 0 })
				if v, err := isolation.Do(context.Background(), b, func(context.Context) (int, error) { return 7, nil }, nil, bulkhead.Normal); v != 7 || err != nil {
					t.Fatalf("next call = %v, %v", v, err)
				}
			})
		}
	}
}

func TestPanicErrorCarriesStack(t *testing.T) {
	for kind, b := range strategies(t, bulkhead.Settings{MaxConcurrent: 1}) {
		err := b.Execute(context.Background(), bulkhead.Normal, func(context.Context) error { panic("kaput") })
		var pe *isolation.PanicError
		if !errors.As(err, &pe) || pe.Value != "kaput" || !strings.Contains(string(pe.Stack), "TestPanicErrorCarriesStack") {
			t.Fatalf("%s: err = %v (%#v)", kind, err, pe)
		}
	}
}

// TestRejectionGoesToFallback: a full bulkhead rejects with queue_full and
// the fallback gives the caller a clean result.
func TestRejectionGoesToFallback(t *testing.T) {
	for kind, b := range strategies(t, bulkhead.Settings{MaxConcurrent: 1, MaxQueue: 0}) {
		t.Run(kind, func(t *testing.T) {
			g := newGate()
			first := async(func() error { return b.Execute(context.Background(), bulkhead.Normal, g.wait) })
			g.awaitEntered(t, 1)

			var fbErr error
			got, err := isolation.Do(context.Background(), b, func(context.Context) (string, error) {
				t.Error("a rejected call ran")
				return "", nil
			}, fallbackTo("cached", &fbErr), bulkhead.Normal)
			if got != "cached" || err != nil || !errors.Is(fbErr, bulkhead.ErrQueueFull) {
				t.Fatalf("Do = %q, %v (fallback saw %v)", got, err, fbErr)
			}
			_, err = isolation.Do(context.Background(), b, func(context.Context) (string, error) { return "", nil }, nil, bulkhead.Normal)
			if !errors.Is(err, bulkhead.ErrQueueFull) {
				t.Fatalf("without fallback: %v", err)
			}
			g.Open()
			if err := recv(t, first); err != nil {
				t.Fatal(err)
			}
			if s := b.Snapshot(); s.Rejected[bulkhead.ReasonQueueFull] != 2 || s.InUse != 0 {
				t.Fatalf("snapshot %+v", s)
			}
		})
	}
}

// TestCancelWhileQueued: a caller whose context ends while queued gets the
// context's error (through the fallback), and its call never runs.
func TestCancelWhileQueued(t *testing.T) {
	for kind, b := range strategies(t, bulkhead.Settings{MaxConcurrent: 1, MaxQueue: 1}) {
		t.Run(kind, func(t *testing.T) {
			g := newGate()
			first := async(func() error { return b.Execute(context.Background(), bulkhead.Normal, g.wait) })
			g.awaitEntered(t, 1)
			ctx, cancel := context.WithCancel(context.Background())
			queued := async(func() error {
				return b.Execute(ctx, bulkhead.Normal, func(context.Context) error {
					t.Error("a cancelled call ran")
					return nil
				})
			})
			testkit.Eventually(t, "the call is queued", func() bool { return b.Snapshot().QueuedTotal() == 1 })
			cancel()
			if err := recv(t, queued); !errors.Is(err, context.Canceled) {
				t.Fatalf("queued call: %v", err)
			}
			g.Open()
			if err := recv(t, first); err != nil {
				t.Fatal(err)
			}
			if s := b.Snapshot(); s.Cancelled != 1 || s.QueuedTotal() != 0 {
				t.Fatalf("snapshot %+v", s)
			}
		})
	}
}

// TestSemaphoreGoexit: runtime.Goexit in a call (t.FailNow does it) still
// gives the permit back.
func TestSemaphoreGoexit(t *testing.T) {
	s := isolation.NewSemaphore(mustLimiter(t, "dep", bulkhead.Settings{MaxConcurrent: 1}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Execute(context.Background(), bulkhead.Normal, func(context.Context) error {
			runtime.Goexit()
			return nil
		})
	}()
	<-done
	if in := s.Snapshot().InUse; in != 0 {
		t.Fatalf("InUse after Goexit = %d", in)
	}
}

func TestObserver(t *testing.T) {
	obs := newCountingObserver()
	sem := isolation.NewSemaphore(mustLimiter(t, "sem", bulkhead.Settings{MaxConcurrent: 1}), isolation.WithObserver(obs))
	pool := mustPool(t, "pool", bulkhead.Settings{MaxConcurrent: 1}, isolation.WithObserver(obs))
	for _, b := range []isolation.Bulkhead{sem, pool} {
		_ = b.Execute(context.Background(), bulkhead.Normal, func(context.Context) error { return nil })
		_ = b.Execute(context.Background(), bulkhead.Normal, func(context.Context) error { return errBoom })
		_ = b.Execute(context.Background(), bulkhead.Normal, func(context.Context) error { panic("x") })
		// The pool reports Finished after the caller has its result.
		testkit.Eventually(t, "three calls finished", func() bool { _, f, _ := obs.counts(b.Name()); return f == 3 })
		if a, f, bad := obs.counts(b.Name()); a != 3 || f != 3 || bad != 2 {
			t.Fatalf("%s: admitted %d finished %d failed %d", b.Name(), a, f, bad)
		}
	}
}

func TestGroupAndSources(t *testing.T) {
	reg := bulkhead.NewRegistry()
	if _, err := reg.Apply(map[string]bulkhead.Settings{"b": {MaxConcurrent: 1}}); err != nil {
		t.Fatal(err)
	}
	g := isolation.Group{
		mustPool(t, "c", bulkhead.Settings{MaxConcurrent: 1}),
		isolation.NewSemaphore(mustLimiter(t, "a", bulkhead.Settings{MaxConcurrent: 2})),
	}
	var names []string
	for _, s := range (isolation.Sources{reg, g}).Snapshots() {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "a,b,c" {
		t.Fatalf("names %v", names)
	}
}
