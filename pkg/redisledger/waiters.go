package redisledger

import "sync"

// wakeMsg is what a replica's channel says of one of its waiters.
type wakeMsg byte

const (
	wakeGranted wakeMsg = 'g' // a release handed it a permit
	wakeShed    wakeMsg = 's' // a higher-class arrival evicted it
)

// waiters are this replica's Checks waiting in a global queue, by token:
// the subscriber hands each the message its token receives.
type waiters struct {
	mu sync.Mutex
	m  map[string]chan wakeMsg
}

func newWaiters() *waiters { return &waiters{m: map[string]chan wakeMsg{}} }

func (w *waiters) add(token string) <-chan wakeMsg {
	ch := make(chan wakeMsg, 1)
	w.mu.Lock()
	w.m[token] = ch
	w.mu.Unlock()
	return ch
}

func (w *waiters) remove(token string) {
	w.mu.Lock()
	delete(w.m, token)
	w.mu.Unlock()
}

// deliver passes a message ("g" or "s" followed by the token) to its
// waiter. A message for no waiter (it left, or was answered by its script)
// is dropped.
func (w *waiters) deliver(payload string) {
	if len(payload) < 2 {
		return
	}
	m, token := wakeMsg(payload[0]), payload[1:]
	w.mu.Lock()
	ch := w.m[token]
	w.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- m:
	default:
	}
}
