//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
)

// BenchmarkThroughEnvoy measures requests through the real Envoy with and
// without the bulkhead in the path, in one run against one Envoy: the route
// /plain has ext_authz disabled, /catalog takes and returns a permit. Both
// reach the same upstream (no delay). Compare the pair:
//
//	go test -tags e2e -run '^$' -bench ThroughEnvoy -count 5 ./e2e/ | benchstat -col /route -
func BenchmarkThroughEnvoy(b *testing.B) {
	s := startStack(b, "bulkheads:\n  catalog: {max_concurrent: 1000}\n", func(p *envoy.Params) {
		p.Routes = append(p.Routes, envoy.Route{Name: "plain", Prefix: "/plain", Unguarded: true, Upstream: p.Routes[0].Upstream})
	})
	for _, route := range []string{"plain", "catalog"} {
		b.Run("route="+route, func(b *testing.B) {
			url := s.base + "/" + route
			var mu sync.Mutex
			var all []time.Duration
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var lat []time.Duration
				for pb.Next() {
					req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
					start := time.Now()
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					resp.Body.Close()
					lat = append(lat, time.Since(start))
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
				mu.Lock()
				all = append(all, lat...)
				mu.Unlock()
			})
			b.StopTimer()
			if len(all) > 0 {
				slices.Sort(all)
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(len(all))/b.Elapsed().Seconds(), "req/s")
			}
		})
	}
}
