package bulkhead_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// A limiter of one permit and a queue of one: the first caller is admitted,
// the second waits, a third finds the queue full; growing the limit grants
// the waiter at once.
func ExampleLimiter() {
	l, err := bulkhead.New("catalog", bulkhead.Settings{MaxConcurrent: 1, MaxQueue: 1})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	first, err := l.Acquire(ctx, bulkhead.Normal)
	fmt.Println("first admitted:", err == nil)

	// The second caller queues behind the first.
	second := make(chan bulkhead.Permit)
	go func() {
		p, err := l.Acquire(ctx, bulkhead.Normal)
		if err != nil {
			panic(err)
		}
		second <- p
	}()
	for l.Snapshot().QueuedTotal() == 0 {
		runtime.Gosched() // until the second caller has queued
	}
	fmt.Println("queued:", l.Snapshot().QueuedTotal())

	// The queue is full: a third caller is rejected at once, with a reason.
	_, err = l.Acquire(ctx, bulkhead.Normal)
	fmt.Println("third:", err, "- queue full:", errors.Is(err, bulkhead.ErrQueueFull))

	// A larger limit grants the waiter without waiting for a release.
	if err := l.Resize(bulkhead.Settings{MaxConcurrent: 2, MaxQueue: 1}); err != nil {
		panic(err)
	}
	p := <-second
	s := l.Snapshot()
	fmt.Println("after resize: in use", s.InUse, "queued", s.QueuedTotal())

	// Each permit is given back once; a second release is counted, not honoured.
	fmt.Println("released:", first.Release(), p.Release(), "again:", first.Release())
	s = l.Snapshot()
	fmt.Println("in use", s.InUse, "released", s.Released, "duplicates", s.DuplicateReleases)
	// Output:
	// first admitted: true
	// queued: 1
	// third: bulkhead: queue full - queue full: true
	// after resize: in use 2 queued 0
	// released: true true again: false
	// in use 0 released 2 duplicates 1
}
