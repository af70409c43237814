package main

import (
	"context"
	"os"
	"os/signal"

	"golang.org/x/sync/errgroup"
)

// interrupts returns ctx, which ends at the first of sigs (Ctrl-C: stop
// sending, let the requests in flight finish), and abort, which ends at the
// second (stop waiting for them). abort's end also ends ctx. After the
// second signal, sigs get their default action back: a third Ctrl-C ends the
// process at once (the kernel then kills the children, see sysProcAttr).
// release stops listening, ends both contexts and waits for the listener.
func interrupts(parent context.Context, sigs ...os.Signal) (ctx, abort context.Context, release func()) {
	abort, cancelAbort := context.WithCancel(parent)
	ctx, cancelCtx := context.WithCancel(abort)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, sigs...)
	var g errgroup.Group
	g.Go(func() error {
		for received := 0; received < 2; {
			select {
			case <-ch:
				received++
				if received == 1 {
					cancelCtx()
					continue
				}
				signal.Stop(ch)
				cancelAbort()
			case <-abort.Done():
				return nil
			}
		}
		return nil
	})
	return ctx, abort, func() {
		signal.Stop(ch)
		cancelAbort()
		cancelCtx()
		_ = g.Wait()
	}
}
