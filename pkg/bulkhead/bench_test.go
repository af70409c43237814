package bulkhead

import (
	"context"
	"fmt"
	"testing"

	"golang.org/x/sync/semaphore"
)

// Run as a pair:
//   go test -run '^$' -bench 'AcquireRelease$|SemaphoreBaseline$' -count 10 ./pkg/bulkhead | benchstat -col /name -

func BenchmarkAcquireRelease(b *testing.B) {
	l := mustNew(b, Settings{MaxConcurrent: 100, MaxQueue: 100, ReserveCritical: 0.1})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, err := l.Acquire(ctx, Normal)
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
}

func BenchmarkSemaphoreBaseline(b *testing.B) {
	s := semaphore.NewWeighted(100)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Acquire(ctx, 1); err != nil {
			b.Fatal(err)
		}
		s.Release(1)
	}
}

func BenchmarkAcquireReleaseParallel(b *testing.B) {
	l := mustNew(b, Settings{MaxConcurrent: 1 << 20})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			p, err := l.Acquire(ctx, Normal)
			if err != nil {
				b.Fatal(err)
			}
			p.Release()
		}
	})
}

func BenchmarkSemaphoreBaselineParallel(b *testing.B) {
	s := semaphore.NewWeighted(1 << 20)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			_ = s.Acquire(ctx, 1)
			s.Release(1)
		}
	})
}

// Contended: 4 permits, 8x GOMAXPROCS goroutines, so most acquires wait.
func BenchmarkAcquireReleaseContended(b *testing.B) {
	l := mustNew(b, Settings{MaxConcurrent: 4, MaxQueue: 1 << 16})
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			p, err := l.Acquire(ctx, Normal)
			if err != nil {
				b.Fatal(err)
			}
			p.Release()
		}
	})
}

func BenchmarkSemaphoreBaselineContended(b *testing.B) {
	s := semaphore.NewWeighted(4)
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			_ = s.Acquire(ctx, 1)
			s.Release(1)
		}
	})
}

// 1,000 bulkheads behind one registry, acquired round-robin in parallel.
func BenchmarkRegistry1000Bulkheads(b *testing.B) {
	r := NewRegistry()
	want := make(map[string]Settings, 1000)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("cluster-%04d", i)
		want[keys[i]] = Settings{MaxConcurrent: 64, MaxQueue: 64, ReserveCritical: 0.1}
	}
	if _, err := r.Apply(want); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		i := 0
		for pb.Next() {
			p, err := r.Get(keys[i%len(keys)]).Acquire(ctx, Priority(i%3))
			if err != nil {
				b.Fatal(err)
			}
			p.Release()
			i += 7
		}
	})
}
