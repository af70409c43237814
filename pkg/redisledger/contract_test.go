package redisledger

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/admission/admissiontest"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// The Redis ledger keeps the admission contract, on a real redis-server,
// as the servers are given it: under its unavailable policy (Fallback).
func TestContract(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var n atomic.Int32
	admissiontest.Run(t, func(t *testing.T, bulkheads map[string]bulkhead.Settings) admissiontest.Backend {
		reg := bulkhead.NewRegistry()
		if _, err := reg.Apply(bulkheads); err != nil {
			t.Fatal(err)
		}
		// A store of its own: a fresh prefix.
		prefix := fmt.Sprintf("contract%d:", n.Add(1))
		l := New(f.rdb, Config{Prefix: prefix, Replica: "a", Timeout: time.Second, Heartbeat: admissiontest.Heartbeat,
			Known: func(name string) bool { return reg.Get(name) != nil }, Tick: 100 * time.Millisecond}, f.obs, f.rec, nil)
		fb := NewFallback(l, admission.FailClosed, nopFallbackRecorder{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = fb.Run(ctx, reg) }()
		t.Cleanup(func() { cancel(); <-done })
		testkit.Eventually(t, "ledger strict", func() bool { return l.State() == admission.Strict })
		testkit.Eventually(t, "wake-up channel subscribed", func() bool {
			n, err := f.rdb.PubSubNumSub(context.Background(), prefix+"wake:a").Result()
			return err == nil && n[prefix+"wake:a"] == 1
		})
		return admissiontest.Backend{Ledger: queuedIn{fb, f, prefix}, Bulkheads: reg}
	})
}

// queuedIn tells the suite how many wait in a bulkhead's global queue.
type queuedIn struct {
	admission.Ledger
	f      *fixture
	prefix string
}

func (q queuedIn) Queued(name string) int {
	v, _ := q.f.rdb.HGet(context.Background(), Key(q.prefix, name, "s"), "qlen").Int()
	return v
}

type nopFallbackRecorder struct{}

func (nopFallbackRecorder) FailOpen(string) {}
