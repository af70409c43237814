package isolation

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// Header names shared by the middleware in the subpackages and the sidecar.
const (
	// PriorityHeader carries a request's class: critical, normal or
	// best_effort (an HTTP header, or gRPC metadata).
	PriorityHeader = "x-bulkhead-priority"
	// ReasonHeader carries the reason of a rejection.
	ReasonHeader = "x-bulkhead-reason"
)

// Errors of this package. Rejections are bulkhead's sentinels
// (bulkhead.ErrQueueFull, ErrShed, ErrTimeout, ErrClosed).
var (
	// ErrCallTimeout: the pool's call timeout passed while the call ran; the
	// caller stopped waiting and the call's context was cancelled with this
	// cause.
	ErrCallTimeout = errors.New("isolation: call timed out")
	// ErrPanic: the call panicked (or called runtime.Goexit). The error is a
	// *PanicError.
	ErrPanic = errors.New("isolation: call panicked")
)

// PanicError is the error of a call that panicked. errors.Is(err, ErrPanic)
// holds; when the panic value is an error, errors.Is and errors.As see it too.
type PanicError struct {
	// Value is what the call panicked with (nil for runtime.Goexit).
	Value any
	// Stack is the goroutine's stack at the recovery.
	Stack []byte
}

func newPanicError(v any) *PanicError { return &PanicError{Value: v, Stack: debug.Stack()} }

func (e *PanicError) Error() string {
	if e.Value == nil {
		return ErrPanic.Error() + ": runtime.Goexit"
	}
	return fmt.Sprintf("%s: %v", ErrPanic.Error(), e.Value)
}

// Unwrap returns ErrPanic and, when the panic value is an error, that error.
func (e *PanicError) Unwrap() []error {
	if err, ok := e.Value.(error); ok {
		return []error{ErrPanic, err}
	}
	return []error{ErrPanic}
}

// Observer is told about the calls a bulkhead admits, e.g. to record
// metrics (callmetrics adapts pkg/metrics). Its methods are called on the
// caller's or a worker's goroutine, concurrently, outside every lock; they
// must not block.
type Observer interface {
	// Admitted: a call to dependency was granted a permit after waiting wait.
	Admitted(dependency string, wait time.Duration)
	// Finished: an admitted call ended after holding its permit for hold.
	// failed reports an error or a panic (or, in the middleware, a
	// server-fault status).
	Finished(dependency string, hold time.Duration, failed bool)
}

// Bulkhead runs calls in isolation. *Semaphore and *Pool implement it; the
// interface is sealed, because Do relies on how they report whether the
// call ran.
type Bulkhead interface {
	// Name returns the bulkhead's key (the metrics' dependency label).
	Name() string
	// Snapshot returns the bulkhead's state and counters.
	Snapshot() bulkhead.Snapshot
	// Execute runs call under the bulkhead with priority p and returns
	// call's error, or why call did not run to completion: a rejection
	// (bulkhead.ErrQueueFull, ErrShed, ErrTimeout, ErrClosed), ctx's error
	// (the caller stopped waiting), ErrCallTimeout, or a *PanicError.
	Execute(ctx context.Context, p bulkhead.Priority, call func(context.Context) error) error

	// execute is Execute that also reports whether t returned before it did
	// (ran); when ran, err is t's own error.
	execute(ctx context.Context, p bulkhead.Priority, t task) (ran bool, err error)
}

// task is a call to run. *result[T] and funcTask are tasks; converting
// either to a task allocates nothing.
type task interface {
	run(ctx context.Context) error
}

type funcTask func(context.Context) error

func (f funcTask) run(ctx context.Context) error { return f(ctx) }

var (
	_ Bulkhead = (*Semaphore)(nil)
	_ Bulkhead = (*Pool)(nil)
)

// Do runs call under b with priority p and returns its result. When call
// does not run to completion (the bulkhead rejected it, the caller's ctx
// ended while it waited, the pool's call timeout passed, or it panicked),
// Do returns fallback(ctx, err) if fallback is not nil, and the zero T and
// err otherwise. Errors returned by call itself are returned unchanged,
// without the fallback: wrap call to fall back on them too.
//
// With a *Semaphore, call runs on the caller's goroutine and Do allocates
// nothing when it need not wait. With a *Pool, call runs on a worker; when
// the caller stops waiting, call's context is cancelled and its result,
// when it comes, is dropped.
func Do[T any](ctx context.Context, b Bulkhead, call func(context.Context) (T, error),
	fallback func(context.Context, error) (T, error), p bulkhead.Priority) (T, error) {
	if s, ok := b.(*Semaphore); ok {
		return doSemaphore(ctx, s, call, fallback, p)
	}
	r := &result[T]{call: call}
	ran, err := b.execute(ctx, p, r)
	if ran {
		return r.val, r.err
	}
	return fallBack(ctx, fallback, err)
}

// result carries a call's return values from the goroutine that ran it.
type result[T any] struct {
	call func(context.Context) (T, error)
	val  T
	err  error
}

func (r *result[T]) run(ctx context.Context) error {
	r.val, r.err = r.call(ctx)
	return r.err
}

func fallBack[T any](ctx context.Context, fallback func(context.Context, error) (T, error), err error) (T, error) {
	if fallback != nil {
		return fallback(ctx, err)
	}
	var zero T
	return zero, err
}

// SnapshotSource lists bulkheads for metrics (metrics.SnapshotSource has
// the same method set): *bulkhead.Registry, Group and Sources are ones.
type SnapshotSource interface {
	Snapshots() []bulkhead.Snapshot
}

// Group is a fixed set of bulkheads; it is a SnapshotSource.
type Group []Bulkhead

// Snapshots returns a snapshot of every bulkhead, sorted by name.
func (g Group) Snapshots() []bulkhead.Snapshot {
	out := make([]bulkhead.Snapshot, 0, len(g))
	for _, b := range g {
		out = append(out, b.Snapshot())
	}
	sortSnapshots(out)
	return out
}

// Sources joins snapshot sources, e.g. a bulkhead.Registry whose limiters
// back Semaphores and middleware, and a Group of Pools. Names must be
// distinct across them: metrics reject duplicate series.
type Sources []SnapshotSource

// Snapshots returns every source's snapshots, sorted by name.
func (s Sources) Snapshots() []bulkhead.Snapshot {
	var out []bulkhead.Snapshot
	for _, src := range s {
		out = append(out, src.Snapshots()...)
	}
	sortSnapshots(out)
	return out
}

func sortSnapshots(s []bulkhead.Snapshot) {
	slices.SortStableFunc(s, func(a, b bulkhead.Snapshot) int { return strings.Compare(a.Name, b.Name) })
}
