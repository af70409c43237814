package redisledger

import (
	"context"
	"errors"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// Request is one Check's ask for a permit.
type Request struct {
	Bulkhead string
	Priority bulkhead.Priority
	Settings bulkhead.Settings
	// Tenant is the request's tenant ("" for none); TenantSettings the
	// bulkhead's tenant template (nil: no tenants), MaxTenants the cap.
	Tenant         string
	TenantSettings *bulkhead.Settings
	MaxTenants     int
	TTL            time.Duration
	Node           string
	// Deadline ends the wait (zero: only max_wait does).
	Deadline time.Time
	// Leased is how many permits this replica's capacity lease of the
	// bulkhead has in use (0 without one): the script counts them, fresher
	// than the lease's last report, against the class ceilings.
	Leased int
}

// maxUnboundedWait bounds a wait with neither max_wait nor a deadline.
const maxUnboundedWait = time.Minute

// Acquire takes a permit of r.Bulkhead for r, waiting in the bulkhead's
// global queue if need be, and returns its token. The error is a
// *bulkhead.Rejection, ctx's error, or wraps ErrUnavailable. A deadline
// that passes before Redis answers is that Check's timeout: the error wraps
// bulkhead.ErrTimeout and ErrCallerDeadline, and the replica stays as it was.
func (l *Ledger) Acquire(ctx context.Context, r Request) (string, error) {
	if admission.State(l.state.Load()) != admission.Strict {
		return "", ErrUnavailable
	}
	if !r.Deadline.IsZero() && !time.Now().Before(r.Deadline) {
		// No time left to ask Redis, let alone to wait: as a waiter whose
		// wait ran out (the in-memory limiter could still grant at once).
		return "", bulkhead.ErrTimeout
	}
	token, err := permit.NewToken()
	if err != nil {
		return "", err
	}
	now := time.Now()
	wait := r.Settings.MaxWait
	if !r.Deadline.IsZero() {
		if left := r.Deadline.Sub(now); wait == 0 || left < wait {
			wait = left
		}
	} else if wait == 0 {
		wait = maxUnboundedWait
	}
	w := l.wake.add(token) // before the script: a wake-up may beat its answer
	defer l.wake.remove(token)
	l.calm.stir(r.Bulkhead) // a permit or a waiter in Redis: looked at each tick
	res, err := l.call(ctx, r.Deadline, admission.OpAcquire, l.sc.acquire, l.keysOf(r.Bulkhead), l.acquireArgs(token, r, wait)...)
	if err != nil {
		// The script may have run, and granted or queued: give back what
		// it may hold, when Redis answers, rather than at its lease's end.
		select {
		case l.jobs <- job{name: r.Bulkhead, token: token, release: true, src: permit.Cancel,
			done: admission.DoneFunc(func(permit.Lease, permit.Result) {})}:
		default:
		}
		return "", err
	}
	code, detail, swept, at := reply(res)
	l.expired(r.Bulkhead, swept, at)
	switch code {
	case acquireGranted:
		return token, nil
	case acquireRejected:
		return "", rejection(detail)
	}
	// acquireQueued: wait for a wake-up, max_wait, or the Check's end.
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var recovered <-chan time.Time
	if left, _ := detail.(int64); left > 0 {
		// The bulkhead recovers: serve its queue when the window ends.
		t := time.NewTimer(time.Duration(left) * time.Millisecond)
		defer t.Stop()
		recovered = t.C
	}
	for {
		select {
		case m := <-w:
			if m == wakeGranted {
				return token, nil
			}
			return "", m.rejection()
		case <-recovered:
			// With the Check's context: a slow Redis holds this Check no
			// longer than its deadline, and a look that deadline cut is no
			// outage (look).
			recovered = nil
			l.look(ctx, r.Bulkhead)
		case <-timer.C:
			return l.leave(ctx, r.Bulkhead, token, w, bulkhead.ErrTimeout)
		case <-ctx.Done():
			return l.leave(ctx, r.Bulkhead, token, w, ctx.Err())
		}
	}
}

// acquireArgs are the acquire script's arguments for token's arrival r,
// waiting at most wait.
func (l *Ledger) acquireArgs(token string, r Request, wait time.Duration) []any {
	p := r.Priority
	if !p.Valid() {
		p = bulkhead.BestEffort
	}
	tlim, tmq, maxTenants := 0, 0, r.MaxTenants
	if r.TenantSettings != nil && r.Tenant != "" {
		tlim, tmq = r.TenantSettings.MaxConcurrent, r.TenantSettings.MaxQueue
	}
	if maxTenants <= 0 {
		maxTenants = 1 << 30
	}
	return []any{token, int(p), ms(r.TTL), ms(wait), l.cfg.Replica, r.Node, r.Tenant,
		r.Settings.Ceiling(bulkhead.Critical), r.Settings.Ceiling(bulkhead.Normal), r.Settings.Ceiling(bulkhead.BestEffort),
		r.Settings.MaxQueue, tlim, tmq, maxTenants, ms(l.cfg.Recovery), ms(l.cfg.adopt()), r.Leased}
}

// leave takes a waiter out of the queue after its wait ended with cause
// (ErrTimeout, or the context's error). A permit granted at that moment is
// kept on a timeout (it came in time) and given back otherwise.
func (l *Ledger) leave(ctx context.Context, name, token string, w <-chan wakeMsg, cause error) (string, error) {
	keep := errors.Is(cause, bulkhead.ErrTimeout)
	keepArg := "0"
	if keep {
		keepArg = "1"
	}
	res, err := l.call(context.WithoutCancel(ctx), time.Time{}, admission.OpLeave, l.sc.leave, l.keysOf(name), token, keepArg)
	if err != nil {
		// Not known: a permit granted meanwhile expires with its lease.
		return "", cause
	}
	code, _, _, _ := reply(res)
	switch code {
	case leaveKept:
		return token, nil
	case leaveNotFound:
		// Shed or refused (its wake-up may still be on its way), or purged.
		select {
		case m := <-w:
			if m != wakeGranted {
				return "", m.rejection()
			}
		default:
		}
	}
	return "", cause
}

func rejection(detail any) error {
	switch detail {
	case "timeout":
		return bulkhead.ErrTimeout
	default:
		return bulkhead.ErrQueueFull
	}
}

// Admit implements admission.Ledger: Acquire in the bulkhead's global
// queue, each decision also counted in the limiter's own counters
// (bulkhead.Limiter.CountShared), so that this replica's statuses cover
// what it served. Its errors wrap admission.ErrUnavailable when Redis
// cannot decide.
func (l *Ledger) Admit(ctx context.Context, r admission.Request) (admission.Admitted, error) {
	lim := r.Bulkhead
	name := lim.Name()
	req := Request{Bulkhead: name, Priority: r.Priority, Settings: lim.Settings(), Node: r.Node, Deadline: r.Deadline,
		TTL: r.Lease}
	if l.inLease != nil {
		req.Leased = l.inLease(name)
	}
	if r.Tenants != nil && r.Tenant != "" {
		tmpl := r.Tenants.Template()
		req.Tenant, req.TenantSettings, req.MaxTenants = r.Tenant, &tmpl, r.Tenants.Max()
	}
	token, err := l.Acquire(ctx, req)
	if err == nil {
		if err := ctx.Err(); err != nil {
			// Granted, but nobody waits for the answer.
			l.ReleaseToken(name, token, permit.Cancel)
			lim.Count(r.Priority, bulkhead.ReasonNone, true)
			return admission.Admitted{}, err
		}
		lim.Count(r.Priority, bulkhead.ReasonNone, false)
		return admission.Admitted{Token: token}, nil
	}
	if reason := bulkhead.ReasonOf(err); reason != bulkhead.ReasonNone {
		lim.Count(r.Priority, reason, false)
		return admission.Admitted{}, err
	}
	if !errors.Is(err, ErrUnavailable) && ctx.Err() != nil {
		lim.Count(r.Priority, bulkhead.ReasonNone, true)
		return admission.Admitted{}, ctx.Err()
	}
	return admission.Admitted{}, err
}
