package metrics_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/metrics"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// What the metrics cost each request, apart from the rest of its path:
//
//	go test -run '^$' -bench 'Record' -benchmem ./pkg/metrics
//
// BenchmarkRecordCheck is what an admitted Check records; BenchmarkRecordRelease
// what its release by an access-log entry records (the entry's result, the
// outcome, the release lag, and the ledger's report of the ended lease).

const benchDeps = 100

func newBenchMetrics(b *testing.B) (*metrics.Metrics, []string) {
	b.Helper()
	deps := make([]string, benchDeps)
	want := make(map[string]bulkhead.Settings, benchDeps)
	for i := range deps {
		deps[i] = fmt.Sprintf("bench-%03d", i)
		want[deps[i]] = bulkhead.Settings{MaxConcurrent: 10}
	}
	reg := bulkhead.NewRegistry()
	if _, err := reg.Apply(want); err != nil {
		b.Fatal(err)
	}
	m, err := metrics.New(prometheus.NewRegistry(), reg)
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range deps {
		m.Waited(d, 0) // the series exist, as after a first admission
	}
	return m, deps
}

func BenchmarkRecordCheck(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		m, deps := newBenchMetrics(b)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			m.Waited(deps[i%benchDeps], time.Millisecond)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		m, deps := newBenchMetrics(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				m.Waited(deps[i%benchDeps], time.Millisecond)
			}
		})
	})
}

func BenchmarkRecordRelease(b *testing.B) {
	release := func(m *metrics.Metrics, dep string, at time.Time) {
		m.LogEntry("released")
		m.Outcome(dep, bulkhead.Success)
		m.ReleaseLag(dep, time.Millisecond)
		m.Ended(permit.Lease{Bulkhead: dep, Acquired: at.Add(-20 * time.Millisecond)}, permit.AccessLog, at)
	}
	at := time.Unix(1_000_000, 0)
	b.Run("serial", func(b *testing.B) {
		m, deps := newBenchMetrics(b)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			release(m, deps[i%benchDeps], at)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		m, deps := newBenchMetrics(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				release(m, deps[i%benchDeps], at)
			}
		})
	})
}
