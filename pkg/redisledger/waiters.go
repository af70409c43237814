package redisledger

import (
	"sync"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// wakeMsg is what a replica's channel says of one of its waiters, named as
// common.lua names it (wakeGranted is WAKE_GRANTED, ...).
type wakeMsg byte

const (
	wakeGranted   wakeMsg = 'g' // WAKE_GRANTED: a release handed it a permit
	wakeShed      wakeMsg = 's' // WAKE_SHED: a higher-class arrival evicted it
	wakeQueueFull wakeMsg = 'q' // WAKE_QUEUE_FULL: its tenant let it in, the bulkhead's queue was full
	// wakeRecall (WAKE_RECALL) names a bulkhead, not a waiter: a waiter
	// queued while this replica's capacity lease of it had permits unused.
	wakeRecall wakeMsg = 'l'
	// wakeEnded and wakeHeartbeat (WAKE_ENDED, WAKE_HEARTBEAT) carry a
	// bulkhead name and a token: an entry of a permit this replica may have
	// admitted from its lease reached another replica.
	wakeEnded     wakeMsg = 'e'
	wakeHeartbeat wakeMsg = 'h'
)

// rejection is the error of a waiter that m did not grant a permit.
func (m wakeMsg) rejection() error {
	if m == wakeQueueFull {
		return bulkhead.ErrQueueFull
	}
	return bulkhead.ErrShed
}

// waiters are this replica's Checks waiting in a global queue, by token:
// the subscriber hands each the message its token receives. Every Check
// registers before its script runs (a wake-up may beat the script's
// answer), so the map takes no process-wide lock: sync.Map's writes to
// distinct keys do not wait for each other.
type waiters struct {
	m sync.Map // token -> chan wakeMsg
}

func newWaiters() *waiters { return &waiters{} }

func (w *waiters) add(token string) <-chan wakeMsg {
	ch := make(chan wakeMsg, 1)
	w.m.Store(token, ch)
	return ch
}

func (w *waiters) remove(token string) { w.m.Delete(token) }

// deliver passes a message ("g" or "s" followed by the token) to its
// waiter. A message for no waiter (it left, or was answered by its script)
// is dropped.
func (w *waiters) deliver(payload string) {
	if len(payload) < 2 {
		return
	}
	v, ok := w.m.Load(payload[1:])
	if !ok {
		return
	}
	select {
	case v.(chan wakeMsg) <- wakeMsg(payload[0]):
	default:
	}
}
