//go:build ignore

// schedtrace reads a Go execution trace (the daemon's /debug/pprof/trace) and prints the goroutines'
// scheduling delay (runnable to running): its quantiles, per 50 ms the most goroutines runnable and the
// longest delay, and in three spikes (hard-coded offsets) where the goroutines made runnable had waited.
// It needs golang.org/x/exp/trace, which this module does not require: run it in a module of its own
// (go mod init schedtrace; go get golang.org/x/exp@v0.0.0-20260410095643-746e56fc9e2f; go run . trace.out).
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"golang.org/x/exp/trace"
)

func main() {
	f, _ := os.Open(os.Args[1])
	r, err := trace.NewReader(f)
	if err != nil {
		panic(err)
	}
	runnableAt := map[trace.GoID]trace.Time{}
	var delays []time.Duration
	var start, end trace.Time
	type bucket struct {
		maxRunnable int
		maxDelay    time.Duration
		gcs         int
	}
	buckets := map[int64]*bucket{}
	runnable := 0
	woke := map[string]int{}
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			panic(err)
		}
		if start == 0 {
			start = ev.Time()
		}
		end = ev.Time()
		b := int64(ev.Time().Sub(start) / (50 * time.Millisecond))
		if buckets[b] == nil {
			buckets[b] = &bucket{}
		}
		if ev.Kind() == trace.EventRangeBegin && ev.Range().Name == "GC concurrent mark phase" {
			buckets[b].gcs++
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		from, to := st.Goroutine()
		if to == trace.GoRunnable {
			runnableAt[id] = ev.Time()
			runnable++
			if ms := ev.Time().Sub(start).Milliseconds(); (ms >= 990 && ms < 1100) || (ms >= 2090 && ms < 2200) || (ms >= 2990 && ms < 3081) {
				top := "?"
				for fr := range st.Stack.Frames() {
					top = fr.Func
					if !(len(top) > 8 && top[:8] == "runtime.") {
						break
					}
				}
				woke[top]++
			}
		}
		if from == trace.GoRunnable {
			runnable--
			if t0, ok := runnableAt[id]; ok {
				d := ev.Time().Sub(t0)
				delays = append(delays, d)
				if d > buckets[b].maxDelay {
					buckets[b].maxDelay = d
				}
				delete(runnableAt, id)
			}
		}
		if runnable > buckets[b].maxRunnable {
			buckets[b].maxRunnable = runnable
		}
	}
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	q := func(p float64) time.Duration { return delays[int(p*float64(len(delays)-1))] }
	fmt.Printf("trace %v, %d runnable->running transitions; scheduling delay p50 %v p90 %v p99 %v p99.9 %v max %v\n",
		end.Sub(start), len(delays), q(0.5), q(0.9), q(0.99), q(0.999), delays[len(delays)-1])
	type kv struct {
		k string
		n int
	}
	var ws []kv
	for k, n := range woke {
		ws = append(ws, kv{k, n})
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].n > ws[j].n })
	fmt.Println("in the three spikes, goroutines made runnable, by where they waited:")
	for i, w := range ws {
		if i == 12 {
			break
		}
		fmt.Printf("  %6d %s\n", w.n, w.k)
	}
	var keys []int64
	for k := range buckets {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	fmt.Println("per 50 ms: max goroutines runnable (relative), max delay of a goroutine that started running, GC mark phases begun")
	for _, k := range keys {
		b := buckets[k]
		fmt.Printf("%5d ms  runnable<=%6d  maxdelay %-12v gc %d\n", k*50, b.maxRunnable, b.maxDelay.Round(time.Microsecond), b.gcs)
	}
}
