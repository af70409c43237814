package isolation

import (
	"context"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// worker is one goroutine of a Pool. jobs has room for one job, so handing
// a job to a parked worker never blocks; it is closed to retire an idle
// worker. cur is the job it runs (guarded by the pool's mu).
type worker struct {
	jobs chan *job
	cur  *job
}

// spawnLocked starts a worker and counts it as live; the caller parks it or
// hands it a job. p.mu must be held.
func (p *Pool) spawnLocked() *worker {
	w := &worker{jobs: make(chan *job, 1)}
	p.live++
	p.all[w] = struct{}{}
	go p.work(w)
	return w
}

// growLocked starts idle workers until live reaches the target.
func (p *Pool) growLocked() {
	for p.live < p.target {
		p.idle = append(p.idle, p.spawnLocked())
	}
}

// retireIdleLocked stops idle workers while live exceeds the target (all of
// them once the pool is closed). Busy workers retire when their job ends.
func (p *Pool) retireIdleLocked() {
	for len(p.idle) > 0 && (p.closed || p.live > p.target) {
		n := len(p.idle) - 1
		w := p.idle[n]
		p.idle[n] = nil
		p.idle = p.idle[:n]
		p.live--
		close(w.jobs)
	}
}

// dispatch hands j to an idle worker, or to a new one when none is idle
// (only possible around a resize). A closed pool hands out nothing.
func (p *Pool) dispatch(j *job) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return bulkhead.ErrClosed
	}
	var w *worker
	if n := len(p.idle); n > 0 {
		w = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
	} else {
		w = p.spawnLocked()
	}
	w.cur = j
	w.jobs <- j // room for one, and a worker out of the idle list has none queued
	return nil
}

// work is a worker's loop: run jobs until retired.
func (p *Pool) work(w *worker) {
	defer p.exit(w)
	for j := range w.jobs {
		if !p.run(w, j) {
			return
		}
	}
}

// run runs one job and reports whether the worker stays. Whatever the call
// does (return, panic, runtime.Goexit), the deferred part records the
// outcome, parks or retires the worker, then releases the permit (so that
// the next grant finds the worker idle), and only then signals done, its
// last touch of the job: when the caller has its result, the permit is back.
func (p *Pool) run(w *worker, j *job) (stay bool) {
	returned := false
	defer func() {
		goexit := false
		if !returned {
			v := recover()
			goexit = v == nil
			j.panicked = newPanicError(v)
			p.panics.Add(1)
		}
		j.cancel(nil)
		stay = p.finish(w, j, goexit)
		j.done <- struct{}{} // room for one: never blocks
	}()
	if cause := context.Cause(j.ctx); cause != nil {
		// The caller stopped waiting before a worker picked the job up.
		j.err = cause
	} else {
		j.err = j.task.run(j.ctx)
	}
	returned = true
	return
}

// finish ends a job on worker w: the worker parks, or retires when it is
// dying (goexit), the pool closed, or the pool has more workers than its
// limit. Then the permit goes back and the observer hears of it.
func (p *Pool) finish(w *worker, j *job, goexit bool) bool {
	p.mu.Lock()
	w.cur = nil
	stay := !goexit && !p.closed && p.live <= p.target
	if stay {
		p.idle = append(p.idle, w)
	} else {
		p.live--
	}
	p.leaveLocked()
	p.mu.Unlock()
	j.permit.Release()
	if p.obs != nil {
		p.obs.Finished(p.name, p.clock.Now().Sub(j.granted), j.panicked != nil || j.err != nil)
	}
	return stay
}

// exit removes a worker goroutine that is returning.
func (p *Pool) exit(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.all, w)
	p.signalExitedLocked()
}

func (p *Pool) signalExitedLocked() {
	if p.closed && len(p.all) == 0 && !p.signals.exited {
		p.signals.exited = true
		close(p.exited)
	}
}
