package isolation

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// Pool is pool isolation: a dedicated, bounded set of workers for one
// dependency, fed through a bulkhead.Limiter whose permits are worker slots
// (see the package documentation for the model and its invariants). Create
// it with NewPool and stop it with Close. Safe for concurrent use.
type Pool struct {
	name    string
	lim     *bulkhead.Limiter
	clock   clock.Clock
	obs     Observer
	policy  RejectionPolicy
	timeout time.Duration

	resizeMu sync.Mutex // serialises Resize

	mu      sync.Mutex
	target  int                  // workers wanted: the limiter's max_concurrent
	live    int                  // workers not retiring: idle or running a job
	idle    []*worker            // parked workers, most recent last
	all     map[*worker]struct{} // every worker goroutine that has not exited
	pending int                  // admitted Execute calls whose job has not finished
	closing bool                 // Close was called: Execute rejects new calls
	closed  bool                 // workers are stopping: no job is handed out
	drained chan struct{}        // closed once closing && pending == 0
	exited  chan struct{}        // closed once closed && len(all) == 0
	signals struct{ drained, exited bool }

	jobs sync.Pool // of *job, reused when their caller got the result

	closedRejects atomic.Uint64 // calls rejected by Close before reaching the limiter
	callerRuns    atomic.Uint64
	abandoned     atomic.Uint64
	panics        atomic.Uint64
}

// job is one call handed to a worker. The worker writes err and panicked,
// then sends on done (room for one) and never touches the job again; the
// caller reads them only after receiving from done, and may then reuse the
// job. A job whose caller stopped waiting is never reused.
type job struct {
	ctx      context.Context
	cancel   context.CancelCauseFunc
	task     task
	permit   bulkhead.Permit
	granted  time.Time
	done     chan struct{}
	err      error
	panicked *PanicError
}

func (p *Pool) newJob() *job {
	if j, ok := p.jobs.Get().(*job); ok {
		return j
	}
	return &job{done: make(chan struct{}, 1)}
}

// recycle makes j reusable; only its caller may call it, once done has
// been received from (or j never reached a worker).
func (p *Pool) recycle(j *job) {
	done := j.done
	*j = job{done: done}
	p.jobs.Put(j)
}

// NewPool starts a pool named name with s.MaxConcurrent workers and a queue
// of s.MaxQueue, or returns s's validation error. Priorities, reserves,
// max_wait and shedding are the limiter's (s is its Settings).
func NewPool(name string, s bulkhead.Settings, opts ...PoolOption) (*Pool, error) {
	o := buildOptions(opts)
	lim, err := bulkhead.New(name, s, bulkhead.WithClock(o.clock))
	if err != nil {
		return nil, err
	}
	p := &Pool{
		name: name, lim: lim, clock: o.clock, obs: o.observer, policy: o.policy, timeout: o.timeout,
		target:  s.MaxConcurrent,
		all:     make(map[*worker]struct{}, s.MaxConcurrent),
		drained: make(chan struct{}),
		exited:  make(chan struct{}),
	}
	p.mu.Lock()
	p.growLocked()
	p.mu.Unlock()
	return p, nil
}

// Name returns the pool's key (the metrics' dependency label).
func (p *Pool) Name() string { return p.name }

// Execute submits call with priority p and waits for it; see
// Bulkhead.Execute. The wait ends at the first of: call returns, ctx ends,
// the call timeout passes, or the pool rejects the call.
func (p *Pool) Execute(ctx context.Context, prio bulkhead.Priority, call func(context.Context) error) error {
	_, err := p.execute(ctx, prio, funcTask(call))
	return err
}

func (p *Pool) execute(ctx context.Context, prio bulkhead.Priority, t task) (bool, error) {
	if !p.enter() {
		p.closedRejects.Add(1)
		return false, bulkhead.ErrClosed
	}
	var start, deadline time.Time
	if p.timeout > 0 || p.obs != nil {
		start = p.clock.Now()
	}
	if p.timeout > 0 {
		deadline = start.Add(p.timeout)
	}
	permit, err := p.lim.AcquireBefore(ctx, prio, deadline)
	if err != nil {
		p.leave()
		if p.policy == CallerRuns && callerMayRun(err) {
			return p.runInCaller(ctx, t)
		}
		return false, err
	}
	var granted time.Time
	if p.obs != nil {
		granted = p.clock.Now()
		p.obs.Admitted(p.name, granted.Sub(start))
	}
	j := p.newJob()
	j.ctx, j.cancel = context.WithCancelCause(ctx)
	j.task, j.permit, j.granted = t, permit, granted
	if err := p.dispatch(j); err != nil {
		j.cancel(err)
		permit.Release()
		p.leave()
		p.recycle(j)
		return false, err
	}
	return p.await(ctx, j, deadline)
}

// await waits for j to finish, for ctx to end, or for deadline (if not
// zero). A caller that stops waiting cancels j's context and never touches
// j again.
func (p *Pool) await(ctx context.Context, j *job, deadline time.Time) (bool, error) {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := p.clock.NewTimer(deadline.Sub(p.clock.Now()))
		defer t.Stop()
		expired = t.C()
	}
	var cause error
	select {
	case <-j.done:
		return p.outcome(j)
	case <-ctx.Done():
		cause = ctx.Err()
	case <-expired:
		cause = ErrCallTimeout
	}
	select {
	case <-j.done: // finished at the same moment: the result is there
		return p.outcome(j)
	default:
	}
	j.cancel(cause)
	p.abandoned.Add(1)
	return false, cause
}

// outcome reads a finished job's result and recycles the job.
func (p *Pool) outcome(j *job) (bool, error) {
	ran, err := true, j.err
	if j.panicked != nil {
		ran, err = false, j.panicked
	}
	p.recycle(j)
	return ran, err
}

// callerMayRun reports whether the CallerRuns policy applies to err: a
// rejection by a pool that is still open.
func callerMayRun(err error) bool {
	switch bulkhead.ReasonOf(err) {
	case bulkhead.ReasonQueueFull, bulkhead.ReasonShed, bulkhead.ReasonTimeout:
		return true
	}
	return false
}

// runInCaller runs t on the caller's goroutine, outside the bulkhead.
func (p *Pool) runInCaller(ctx context.Context, t task) (ran bool, err error) {
	p.callerRuns.Add(1)
	defer func() {
		if !ran {
			p.panics.Add(1)
			err = newPanicError(recover())
		}
	}()
	err = t.run(ctx)
	return true, err
}

// enter admits an Execute call into the pool's accounting, unless the pool
// is closing.
func (p *Pool) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return false
	}
	p.pending++
	return true
}

// leave ends an Execute call that will hand no job to a worker.
func (p *Pool) leave() {
	p.mu.Lock()
	p.leaveLocked()
	p.mu.Unlock()
}

func (p *Pool) leaveLocked() {
	p.pending--
	if p.closing && p.pending == 0 && !p.signals.drained {
		p.signals.drained = true
		close(p.drained)
	}
}
