package isolation

import (
	"context"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// Semaphore is semaphore isolation over a bulkhead.Limiter: the caller's
// goroutine runs the call while it holds a permit. It does not own the
// limiter: resize and close it through the Limiter (or the Registry that
// made it). Safe for concurrent use.
type Semaphore struct {
	lim   *bulkhead.Limiter
	obs   Observer
	clock clock.Clock
}

// NewSemaphore returns semaphore isolation over lim.
func NewSemaphore(lim *bulkhead.Limiter, opts ...Option) *Semaphore {
	o := buildOptions(opts)
	return &Semaphore{lim: lim, obs: o.observer, clock: o.clock}
}

// Name returns the limiter's name.
func (s *Semaphore) Name() string { return s.lim.Name() }

// Limiter returns the limiter the semaphore draws permits from.
func (s *Semaphore) Limiter() *bulkhead.Limiter { return s.lim }

// Snapshot returns the limiter's snapshot.
func (s *Semaphore) Snapshot() bulkhead.Snapshot { return s.lim.Snapshot() }

// Execute runs call on the caller's goroutine under a permit of priority p;
// see Bulkhead.Execute.
func (s *Semaphore) Execute(ctx context.Context, p bulkhead.Priority, call func(context.Context) error) error {
	_, err := s.execute(ctx, p, funcTask(call))
	return err
}

func (s *Semaphore) execute(ctx context.Context, p bulkhead.Priority, t task) (ran bool, err error) {
	permit, granted, err := s.acquire(ctx, p)
	if err != nil {
		return false, err
	}
	defer s.finish(permit, granted, &ran, &err)
	err = t.run(ctx)
	ran = true
	return ran, err
}

// acquire takes a permit and tells the observer; granted is the time of
// the grant (zero without an observer).
func (s *Semaphore) acquire(ctx context.Context, p bulkhead.Priority) (bulkhead.Permit, time.Time, error) {
	if s.obs == nil {
		permit, err := s.lim.Acquire(ctx, p)
		return permit, time.Time{}, err
	}
	start := s.clock.Now()
	permit, err := s.lim.Acquire(ctx, p)
	if err != nil {
		return permit, time.Time{}, err
	}
	granted := s.clock.Now()
	s.obs.Admitted(s.lim.Name(), granted.Sub(start))
	return permit, granted, nil
}

// finish runs deferred after a call: it turns a panic (or Goexit) into a
// *PanicError in *err, releases the permit, and tells the observer. ran is
// false when the call did not return.
func (s *Semaphore) finish(permit bulkhead.Permit, granted time.Time, ran *bool, err *error) {
	if !*ran {
		*err = newPanicError(recover())
	}
	permit.Release()
	if s.obs != nil {
		s.obs.Finished(s.lim.Name(), s.clock.Now().Sub(granted), *err != nil)
	}
}

// doSemaphore is Do for a Semaphore, without the closure Execute needs.
func doSemaphore[T any](ctx context.Context, s *Semaphore, call func(context.Context) (T, error),
	fallback func(context.Context, error) (T, error), p bulkhead.Priority) (v T, err error) {
	permit, granted, err := s.acquire(ctx, p)
	if err != nil {
		return fallBack(ctx, fallback, err)
	}
	ran := false
	func() {
		defer s.finish(permit, granted, &ran, &err)
		v, err = call(ctx)
		ran = true
	}()
	if !ran {
		return fallBack(ctx, fallback, err)
	}
	return v, err
}
