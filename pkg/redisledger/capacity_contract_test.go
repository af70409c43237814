package redisledger

import (
	"context"
	"fmt"
	"sync"
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
	t.Parallel()
	f := newFixture(t)
	var n atomic.Int32
	admissiontest.Run(t, func(t *testing.T, bulkheads map[string]bulkhead.Settings) admissiontest.Backend {
		reg := bulkhead.NewRegistry()
		if _, err := reg.Apply(bulkheads); err != nil {
			t.Fatal(err)
		}
		prefix := fmt.Sprintf("capcontract%d:", n.Add(1))
		c := f.capacity(t, capSpec{id: "a", prefix: prefix, reg: reg, hb: admissiontest.Heartbeat})
		return admissiontest.Backend{Ledger: queuedIn{c.Capacity, f, prefix}, Bulkheads: reg}
	})
}

// capReplica is one replica of the capacity-lease backend under test.
type capReplica struct {
	*Capacity
	ledger *Ledger
	leases *permit.Memory
	// stop stops the replica as a daemon stops (its leases given back),
	// once; the test's end does it otherwise.
	stop func()
}

// capSpec is one replica of the capacity-lease backend to start: its name
// and key prefix, the registry it admits from, and what differs from the
// defaults (the fixture's client, calls of at most 1 s, a tick of 100 ms,
// capHeartbeat).
type capSpec struct {
	id, prefix string
	reg        *bulkhead.Registry
	rdb        redis.UniversalClient // through a proxy, for a test that cuts it off
	timeout    time.Duration
	tick       time.Duration
	hb         permit.Heartbeat
	opts       []CapacityOption
}

// capacity starts the replica sp until the test ends; it waits until the
// ledger is strict.
func (f *fixture) capacity(t testing.TB, sp capSpec) capReplica {
	t.Helper()
	rdb, timeout, tick, hb, reg, prefix, id := sp.rdb, sp.timeout, sp.tick, sp.hb, sp.reg, sp.prefix, sp.id
	if rdb == nil {
		rdb = f.rdb
	}
	if timeout == 0 {
		timeout = time.Second
	}
	if tick == 0 {
		tick = 100 * time.Millisecond
	}
	if hb == (permit.Heartbeat{}) {
		hb = capHeartbeat
	}
	l := New(rdb, Config{Prefix: prefix, Replica: id, Timeout: timeout, Heartbeat: hb,
		Known: func(name string) bool { return reg.Get(name) != nil }, Tick: tick}, f.obs, f.rec, nil)
	leases := permit.NewMemory(clock.Real{}, permit.WithSweepInterval(20*time.Millisecond))
	fb := NewFallback(l, admission.FailClosed, nopFallbackRecorder{})
	c := NewCapacity(l, fb, leases, sp.opts...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	go func() { defer func() { done <- struct{}{} }(); _ = fb.Run(ctx, reg) }()
	go func() { defer func() { done <- struct{}{} }(); _ = c.Run(ctx, reg) }()
	go func() { defer func() { done <- struct{}{} }(); _ = leases.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		for range 3 {
			<-done
		}
		leases.Close(permit.Shutdown)
	})
	t.Cleanup(stop)
	testkit.Eventually(t, "ledger strict", func() bool { return l.State() == admission.Strict })
	testkit.Eventually(t, "wake-up channel subscribed", func() bool {
		n, err := f.rdb.PubSubNumSub(context.Background(), prefix+"wake:"+id).Result()
		return err == nil && n[prefix+"wake:"+id] == 1
	})
	return capReplica{Capacity: c, ledger: l, leases: leases, stop: stop}
}
