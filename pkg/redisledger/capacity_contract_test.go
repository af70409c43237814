package redisledger

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/admission/admissiontest"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// The Redis ledger with capacity leases keeps the admission contract, on a
// real redis-server, as the servers would be given it: Capacity over the
// Fallback.
func TestCapacityContract(t *testing.T) {
	f := newFixture(t)
	var n atomic.Int32
	admissiontest.Run(t, func(t *testing.T, bulkheads map[string]bulkhead.Settings) admissiontest.Backend {
		reg := bulkhead.NewRegistry()
		if _, err := reg.Apply(bulkheads); err != nil {
			t.Fatal(err)
		}
		prefix := fmt.Sprintf("capcontract%d:", n.Add(1))
		c := f.capacity(t, "a", prefix, reg, admissiontest.Heartbeat, f.rdb, time.Second)
		return admissiontest.Backend{Ledger: queuedIn{c.Capacity, f, prefix}, Bulkheads: reg}
	})
}

// capReplica is one replica of the capacity-lease backend under test.
type capReplica struct {
	*Capacity
	ledger *Ledger
	leases *permit.Memory
}

// capacity starts a replica named id with capacity leases on prefix,
// through rdb (the fixture's client, or one through a proxy) with calls of
// at most timeout, admitting
// from reg, until the test ends; it waits until the ledger is strict.
func (f *fixture) capacity(t *testing.T, id, prefix string, reg *bulkhead.Registry, hb permit.Heartbeat, rdb redis.UniversalClient,
	timeout time.Duration, opts ...CapacityOption) capReplica {
	t.Helper()
	l := New(rdb, Config{Prefix: prefix, Replica: id, Timeout: timeout, Heartbeat: hb,
		Known: func(name string) bool { return reg.Get(name) != nil }, Tick: 100 * time.Millisecond}, f.obs, f.rec, nil)
	leases := permit.NewMemory(clock.Real{}, permit.WithSweepInterval(20*time.Millisecond))
	fb := NewFallback(l, admission.FailClosed, leases, nopFallbackRecorder{})
	c := NewCapacity(l, fb, leases, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	go func() { defer func() { done <- struct{}{} }(); _ = fb.Run(ctx, reg) }()
	go func() { defer func() { done <- struct{}{} }(); _ = c.Run(ctx, reg) }()
	go func() { defer func() { done <- struct{}{} }(); _ = leases.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 3 {
			<-done
		}
		leases.Close(permit.Shutdown)
	})
	testkit.Eventually(t, "ledger strict", func() bool { return l.State() == admission.Strict })
	testkit.Eventually(t, "wake-up channel subscribed", func() bool {
		n, err := f.rdb.PubSubNumSub(context.Background(), prefix+"wake:"+id).Result()
		return err == nil && n[prefix+"wake:"+id] == 1
	})
	return capReplica{Capacity: c, ledger: l, leases: leases}
}
