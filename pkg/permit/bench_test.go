package permit

import (
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// nopPermit is a permit whose release costs nothing.
type nopPermit struct{}

func (*nopPermit) Release() bool { return true }

func BenchmarkGrantRelease(b *testing.B) {
	g := Grant{Bulkhead: "catalog", TTL: time.Minute, Node: "envoy-1"}
	p := &nopPermit{}
	b.Run("sequential", func(b *testing.B) {
		l := NewMemory(clock.Real{})
		b.ReportAllocs()
		for b.Loop() {
			tok, err := l.Grant(p, g)
			if err != nil {
				b.Fatal(err)
			}
			if _, r := l.Release(tok, AccessLog); r != Released {
				b.Fatal(r)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := NewMemory(clock.Real{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tok, err := l.Grant(p, g)
				if err != nil {
					b.Fatal(err)
				}
				if _, r := l.Release(tok, AccessLog); r != Released {
					b.Fatal(r)
				}
			}
		})
	})
}

func BenchmarkReleaseGarbage(b *testing.B) {
	l := NewMemory(clock.Real{})
	b.ReportAllocs()
	for b.Loop() {
		if _, r := l.Release("AAAAAAAAAAAAAAAAAAAAA!", AccessLog); r != Unknown {
			b.Fatal(r)
		}
	}
}
