package redisledger

import (
	"context"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// ReleaseToken ends token's lease in bulkhead name.
func (l *Ledger) ReleaseToken(name, token string, src permit.Source) (permit.Lease, permit.Result) {
	if !permit.ValidToken(token) {
		l.obs.Ignored(src, permit.Unknown)
		return permit.Lease{}, permit.Unknown
	}
	res, err := l.call(context.Background(), time.Time{}, admission.OpRelease, l.sc.release, l.keysOf(name), token,
		ms(l.cfg.Recovery), ms(l.cfg.adopt()), permit.TokenTag(token))
	return l.released(name, token, src, res, err)
}

// released interprets the release script's answer (or err).
func (l *Ledger) released(name, token string, src permit.Source, res any, err error) (permit.Lease, permit.Result) {
	if err != nil {
		return permit.Lease{}, permit.Unavailable
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
	case releaseForwarded: // the replica that admitted it from its lease releases it
		return permit.Lease{Token: token, Bulkhead: name}, permit.Forwarded
	default: // releaseUnknown
		l.obs.Ignored(src, permit.Unknown)
		return permit.Lease{}, permit.Unknown
	}
}

// RenewToken extends token's lease to ttl from now, or adopts the running
// request's permit (past the limit if need be) when Redis lost it or it
// expired.
func (l *Ledger) RenewToken(name, token string, ttl time.Duration, node string) (permit.Lease, permit.Result) {
	if !permit.ValidToken(token) {
		return permit.Lease{}, permit.Unknown
	}
	res, err := l.call(context.Background(), time.Time{}, admission.OpRenew, l.sc.renew, l.keysOf(name), token, ms(ttl), node,
		ms(l.cfg.Recovery), ms(l.cfg.adopt()), permit.TokenTag(token))
	return l.renewedResult(name, token, res, err)
}

// renewedResult interprets the renew script's answer (or err).
func (l *Ledger) renewedResult(name, token string, res any, err error) (permit.Lease, permit.Result) {
	if err != nil {
		return permit.Lease{}, permit.Unavailable
	}
	code, detail, swept, at := reply(res)
	l.expired(name, swept, at)
	lease := permit.Lease{Token: token, Bulkhead: name}
	switch code {
	case renewRenewed:
		return leaseOf(name, token, detail, at), permit.Renewed
	case renewAdoptedExpired:
		return lease, permit.AdoptedExpired
	case renewAdoptedUnknown:
		return lease, permit.Adopted
	case renewLate:
		return lease, permit.Late
	case renewForwarded:
		return lease, permit.Forwarded
	default: // renewUnknown
		return lease, permit.Unknown
	}
}
