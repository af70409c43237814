package redisledger

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// BenchmarkAdmitRelease is what capacity leases add to a Check's own
// latency, apart from Envoy, the network and the machine's scheduling
// (which make the bench harness's added p99 unjudgeable on 2 shared
// cores): one admission and its release, the backend called directly, as
// the Check and access-log servers call it. memory is one daemon's
// backend (admission.Memory); leases is the capacity-lease backend on a
// real redis-server, far from its limit with its lease held, so that an
// admission takes no Redis call (the path below half the limit).
// Sequential runs one op at a time; parallel runs GOMAXPROCS goroutines,
// their ops contending. Besides ns/op, each reports the p50 and p99 of
// its ops' own durations (p50-ns, p99-ns) and the Redis calls per op
// (leases: the lease loop's renewals, spread over the ops).
//
//	go test -run '^$' -bench AdmitRelease -count 6 ./pkg/redisledger/ | tee /tmp/admit.txt
//	benchstat -col /backend /tmp/admit.txt
func BenchmarkAdmitRelease(b *testing.B) {
	for _, mode := range []string{"sequential", "parallel"} {
		for _, backend := range []string{"memory", "leases"} {
			b.Run("mode="+mode+"/backend="+backend, func(b *testing.B) {
				reg := capRegistry(b, bulkhead.Settings{MaxConcurrent: 1000})
				var l admission.Ledger
				var calls func() int
				if backend == "memory" {
					leases := permit.NewMemory(clock.Real{})
					b.Cleanup(func() { leases.Close(permit.Shutdown) })
					l, calls = admission.NewMemory(reg, leases, capHeartbeat), func() int { return 0 }
				} else {
					f := newFixture(b)
					c := f.capacity(b, capSpec{id: "a", prefix: "bench:", reg: reg, tick: time.Second})
					testkit.Eventually(b, "a lease held", func() bool { h, _, _, ok := f.leaseOf("bench:", "a"); return ok && h > 0 })
					l, calls = c, f.rec.total
				}
				before := calls()
				lat := admitRelease(b, l, reg, mode == "parallel")
				b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
				b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
				b.ReportMetric(float64(calls()-before)/float64(len(lat)), "redis-calls/op")
			})
		}
	}
}

// admitRelease runs b's ops (in parallel: on GOMAXPROCS goroutines) and
// returns their durations, sorted.
func admitRelease(b *testing.B, l admission.Ledger, reg *bulkhead.Registry, parallel bool) []time.Duration {
	var mu sync.Mutex
	var all []time.Duration
	op := func(lat []time.Duration) []time.Duration {
		start := time.Now()
		a, err := l.Admit(context.Background(), capRequest(reg, bulkhead.Normal))
		if err != nil || a.Token == "" {
			b.Fatalf("admit: %+v, %v", a, err)
		}
		if r := releaseSync(l, a.Token); r != permit.Released {
			b.Fatalf("release: %v", r)
		}
		return append(lat, time.Since(start))
	}
	b.ReportAllocs()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			var lat []time.Duration
			for pb.Next() {
				lat = op(lat)
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	} else {
		for b.Loop() {
			all = op(all)
		}
	}
	b.StopTimer()
	slices.Sort(all)
	return all
}
