package redisledger

import (
	"context"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// Release ends token's lease in bulkhead name.
func (l *Ledger) Release(name, token string, src permit.Source) (permit.Lease, permit.Result) {
	if !permit.ValidToken(token) {
		l.obs.Ignored(src, permit.Unknown)
		return permit.Lease{}, permit.Unknown
	}
	res, err := l.call(context.Background(), time.Time{}, admission.OpRelease, l.sc.release, l.keysOf(name), token,
		ms(l.cfg.Recovery), ms(l.cfg.Adopt))
	return l.released(name, token, src, res, err)
}

// released interprets the release script's answer (or err).
func (l *Ledger) released(name, token string, src permit.Source, res any, err error) (permit.Lease, permit.Result) {
	if err != nil {
		return permit.Lease{}, Failed
	}
	code, detail, swept, at := reply(res)
	l.expired(name, swept, at)
	switch code {
	case releaseReleased:
		lease := leaseOf(name, token, detail, at)
		l.obs.Ended(lease, src, time.Now())
		return lease, permit.Released
	case releaseDuplicate:
		l.obs.Ignored(src, permit.Duplicate)
		return permit.Lease{}, permit.Duplicate
	case releaseExpired:
		l.obs.Ignored(src, permit.Expired)
		return permit.Lease{}, permit.Expired
	case releaseWaiter: // a waiter whose Acquire failed: it held nothing yet
		return permit.Lease{}, permit.Unknown
	default: // releaseUnknown
		l.obs.Ignored(src, permit.Unknown)
		return permit.Lease{}, permit.Unknown
	}
}

// Failed is the result of a Release or Renew that did not reach Redis.
const Failed permit.Result = 255

// RenewResult says what a periodic entry did to the shared ledger.
type RenewResult uint8

// The results of Renew. Renewed..UnknownToken are the renew script's codes,
// named alike in common.lua (RENEW_RENEWED..RENEW_UNKNOWN): change one side,
// change the other (TestResultCodesMatchLua).
const (
	Renewed         RenewResult = iota + 1
	AdoptedExpired              // its lease had expired while the request ran
	AdoptedUnknown              // unknown token, adopted in the adoption window
	Late                        // its request has ended
	UnknownToken                // unknown, outside the adoption window
	RenewFailed                 // Redis did not answer
	numRenewResults = RenewFailed
)

// Renew extends token's lease to ttl from now, or adopts the running
// request's permit (past the limit if need be) when Redis lost it or it
// expired; force adopts whatever the adoption window (a hand-over).
func (l *Ledger) Renew(name, token string, ttl time.Duration, node string, force bool) (permit.Lease, RenewResult) {
	if !permit.ValidToken(token) {
		return permit.Lease{}, UnknownToken
	}
	res, err := l.call(context.Background(), time.Time{}, admission.OpRenew, l.sc.renew, l.keysOf(name), token, ms(ttl), node,
		ms(l.cfg.Recovery), ms(l.cfg.Adopt), forceArg(force))
	return l.renewedResult(name, token, res, err)
}

func forceArg(force bool) string {
	if force {
		return "1"
	}
	return "0"
}

// renewedResult interprets the renew script's answer (or err).
func (l *Ledger) renewedResult(name, token string, res any, err error) (permit.Lease, RenewResult) {
	if err != nil {
		return permit.Lease{}, RenewFailed
	}
	code, detail, swept, at := reply(res)
	l.expired(name, swept, at)
	lease := permit.Lease{Token: token, Bulkhead: name}
	if RenewResult(code) == Renewed {
		lease = leaseOf(name, token, detail, at)
	}
	return lease, RenewResult(code)
}
