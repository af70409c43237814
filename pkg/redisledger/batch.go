package redisledger

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// maxBatch bounds the releases and renewals sent in one pipeline.
const maxBatch = 256

// job is a release or a renewal waiting for the batcher.
type job struct {
	name, token string
	release     bool
	src         permit.Source
	ttl         time.Duration
	node        string
	done        admission.Done
}

// ReleaseAsync is Release without waiting: the release joins the next
// pipeline of releases and renewals (one round trip for all that arrived
// meanwhile), and done is called with its result from the batcher's
// goroutine. An access-log stream, whose entries come one after another,
// then costs Redis round trips only per batch. With the queue full (or
// before Run) the release is made at once, as ReleaseToken, or fails at once
// while Redis is unavailable.
func (l *Ledger) ReleaseAsync(name, token string, src permit.Source, done admission.Done) {
	if !permit.ValidToken(token) {
		done.Done(l.ReleaseToken(name, token, src))
		return
	}
	select {
	case l.jobs <- job{name: name, token: token, release: true, src: src, done: done}:
	default:
		if l.State() == admission.Unavailable { // not on the stream's goroutine, for a Redis known down
			done.Done(permit.Lease{}, permit.Unavailable)
			return
		}
		done.Done(l.ReleaseToken(name, token, src))
	}
}

// RenewAsync is RenewToken without waiting, as ReleaseAsync is ReleaseToken.
func (l *Ledger) RenewAsync(name, token string, ttl time.Duration, node string, done admission.Done) {
	if !permit.ValidToken(token) {
		done.Done(l.RenewToken(name, token, ttl, node))
		return
	}
	select {
	case l.jobs <- job{name: name, token: token, ttl: ttl, node: node, done: done}:
	default:
		if l.State() == admission.Unavailable {
			done.Done(permit.Lease{}, permit.Unavailable)
			return
		}
		done.Done(l.RenewToken(name, token, ttl, node))
	}
}

// batch sends queued jobs, as many as are waiting (up to maxBatch), in one
// pipeline each time, until ctx ends; then it finishes what is queued.
func (l *Ledger) batch(ctx context.Context) error {
	jobs := make([]job, 0, maxBatch)
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case j := <-l.jobs:
					l.send([]job{j})
				default:
					return nil
				}
			}
		case j := <-l.jobs:
			jobs = append(jobs[:0], j)
		more:
			for len(jobs) < maxBatch {
				select {
				case j := <-l.jobs:
					jobs = append(jobs, j)
				default:
					break more
				}
			}
			l.send(jobs)
		}
	}
}

// send runs jobs in one pipeline and calls each one's done. Jobs whose
// script Redis did not have (NOSCRIPT: a restarted or new master) run again
// after the scripts are loaded.
func (l *Ledger) send(jobs []job) {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Timeout*4)
	defer cancel()
	cmds := l.pipeline(ctx, jobs)
	var again []int
	for i, c := range cmds {
		if c.Err() != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 && l.sc.release.Load(ctx, l.rdb).Err() == nil && l.sc.renew.Load(ctx, l.rdb).Err() == nil {
		retry := make([]job, len(again))
		for k, i := range again {
			retry[k] = jobs[i]
		}
		for k, c := range l.pipeline(ctx, retry) {
			cmds[again[k]] = c
		}
	}
	for i, j := range jobs {
		res, err := cmds[i].Result()
		op := admission.OpRenew
		if j.release {
			op = admission.OpRelease
		}
		if err != nil {
			l.unavailable(op, err)
		}
		if j.release {
			j.done.Done(l.released(j.name, j.token, j.src, res, err))
		} else {
			j.done.Done(l.renewedResult(j.name, j.token, res, err))
		}
	}
}

func (l *Ledger) pipeline(ctx context.Context, jobs []job) []*redis.Cmd {
	start := time.Now()
	pipe := l.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(jobs))
	for i, j := range jobs {
		if j.release {
			cmds[i] = l.sc.release.EvalSha(ctx, pipe, l.keysOf(j.name), j.token, ms(l.cfg.Recovery), ms(l.cfg.adopt()),
				permit.TokenTag(j.token))
		} else {
			cmds[i] = l.sc.renew.EvalSha(ctx, pipe, l.keysOf(j.name), j.token, ms(j.ttl), j.node,
				ms(l.cfg.Recovery), ms(l.cfg.adopt()), permit.TokenTag(j.token))
		}
	}
	_, err := pipe.Exec(ctx)
	d := time.Since(start) / time.Duration(len(jobs))
	for i, j := range jobs {
		op := admission.OpRenew
		if j.release {
			op = admission.OpRelease
		}
		e := cmds[i].Err()
		if e == nil || redis.HasErrorPrefix(e, "NOSCRIPT") {
			e = nil
		} else if err == nil {
			e = cmds[i].Err()
		}
		l.rec.LedgerCall(op, d, e)
	}
	return cmds
}

// Release implements admission.Ledger: the release joins the next
// pipeline (ReleaseAsync). An entry naming no configured bulkhead never
// reaches Redis (Unknown); while Redis is unreachable the answer is
// Unavailable at once.
func (l *Ledger) Release(e admission.Entry, done admission.Done) {
	name := string(e.Bulkhead)
	if !l.serves(name, done) {
		return
	}
	l.ReleaseAsync(name, e.Token, permit.AccessLog, done)
}

// Renew implements admission.Ledger as Release does: the renewal (or the
// adoption, which the renew script decides) joins the next pipeline.
func (l *Ledger) Renew(e admission.Entry, done admission.Done) {
	name := string(e.Bulkhead)
	if !l.serves(name, done) {
		return
	}
	l.calm.stir(name) // a renewal may adopt a permit Redis did not count
	l.RenewAsync(name, e.Token, l.cfg.Heartbeat.TTL, e.Node, done)
}

// serves reports whether an entry naming bulkhead name goes to Redis, or
// answers done itself.
func (l *Ledger) serves(name string, done admission.Done) bool {
	switch {
	case l.cfg.Known != nil && !l.cfg.Known(name):
		done.Done(permit.Lease{}, permit.Unknown)
		return false
	case !l.Reachable():
		done.Done(permit.Lease{}, permit.Unavailable)
		return false
	}
	return true
}
