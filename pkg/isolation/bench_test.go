package isolation_test

import (
	"context"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
)

// The cost of isolation around a call that does nothing:
//   go test -run '^$' -bench . -benchmem ./pkg/isolation

//go:noinline
func work(context.Context) (int, error) { return 1, nil }

var sink int

func BenchmarkPlainCall(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		v, _ := work(ctx)
		sink += v
	}
}

// BenchmarkPlainGoroutineCall: what "run it on another goroutine" costs
// without a bulkhead: go func plus a channel for the result.
func BenchmarkPlainGoroutineCall(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ch := make(chan int, 1)
		go func() {
			v, _ := work(ctx)
			ch <- v
		}()
		sink += <-ch
	}
}

func BenchmarkLimiterAcquireRelease(b *testing.B) {
	l := mustLimiter(b, "dep", bulkhead.Settings{MaxConcurrent: 100, MaxQueue: 100})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, err := l.Acquire(ctx, bulkhead.Normal)
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
}

func BenchmarkSemaphoreDo(b *testing.B) {
	s := isolation.NewSemaphore(mustLimiter(b, "dep", bulkhead.Settings{MaxConcurrent: 100, MaxQueue: 100}))
	benchDo(b, s)
}

func BenchmarkPoolDo(b *testing.B) {
	benchDo(b, mustPool(b, "dep", bulkhead.Settings{MaxConcurrent: 100, MaxQueue: 100}))
}

func BenchmarkPoolDoCallTimeout(b *testing.B) {
	benchDo(b, mustPool(b, "dep", bulkhead.Settings{MaxConcurrent: 100, MaxQueue: 100}, isolation.WithCallTimeout(10e9)))
}

func benchDo(b *testing.B, bh isolation.Bulkhead) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		v, err := isolation.Do(ctx, bh, work, nil, bulkhead.Normal)
		if err != nil {
			b.Fatal(err)
		}
		sink += v
	}
}

// Parallel variants: GOMAXPROCS callers at once.

func BenchmarkPlainGoroutineCallParallel(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			ch := make(chan int, 1)
			go func() {
				v, _ := work(ctx)
				ch <- v
			}()
			<-ch
		}
	})
}

func BenchmarkSemaphoreDoParallel(b *testing.B) {
	s := isolation.NewSemaphore(mustLimiter(b, "dep", bulkhead.Settings{MaxConcurrent: 100, MaxQueue: 100}))
	benchDoParallel(b, s)
}

func BenchmarkPoolDoParallel(b *testing.B) {
	benchDoParallel(b, mustPool(b, "dep", bulkhead.Settings{MaxConcurrent: 100, MaxQueue: 100}))
}

func benchDoParallel(b *testing.B, bh isolation.Bulkhead) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := isolation.Do(ctx, bh, work, nil, bulkhead.Normal); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
