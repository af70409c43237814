package redisledger

import (
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// A replica hears every periodic entry of its permits from the moment its
// ledger became strict; while it is not strict, from no earlier than now.
func TestHearsAllSinceStrict(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := Config{Prefix: "test:", Replica: "a", Timeout: time.Second, Heartbeat: permit.Heartbeat{Interval: time.Second, TTL: time.Second}, Tick: time.Hour}
	down := New(f.rdb, cfg, f.obs, f.rec, nil) // never ticked: unavailable
	before := time.Now()
	if got := down.HearsAllSince(); got.Before(before) {
		t.Fatalf("an unavailable ledger hears all since %v, before now (%v)", got, before)
	}
	l := f.alone(cfg)
	after := time.Now()
	if got := l.HearsAllSince(); got.Before(before) || got.After(after) {
		t.Fatalf("a ledger strict since its tick (between %v and %v) hears all since %v", before, after, got)
	}
}
