package replication

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/control"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// Two replicas' admin overrides of one bulkhead end the same at every
// replica, the one written last, whatever the replicas' clocks say: a
// replica whose clock is an hour ahead cannot win with the older change.
func TestOverrideOrderIsRedisNotReplicaClocks(t *testing.T) {
	srv := testkit.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()

	type replica struct {
		sync *overrideSync
		reg  *bulkhead.Registry
		ctl  *control.Control
	}
	start := func(clk clock.Clock) replica {
		log := slog.New(slog.DiscardHandler)
		reg := bulkhead.NewRegistry()
		if _, err := reg.Apply(map[string]bulkhead.Settings{"orders": {MaxConcurrent: 10}}); err != nil {
			t.Fatal(err)
		}
		o := newOverrideSync(rdb, "test:", log)
		return replica{o, reg, control.New(reg, nil, log, control.WithClock(clk), control.WithOverrideSink(o.sink))}
	}
	// sync is one round of the replica's loop: the change made there, if
	// any, written, then the others' read.
	sync := func(r replica) {
		select {
		case ev := <-r.sync.events:
			r.sync.take(ev)
		default:
		}
		if err := r.sync.flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.sync.pull(ctx, r.ctl); err != nil {
			t.Fatal(err)
		}
	}
	limit := func(r replica) int { return r.reg.Get("orders").Settings().MaxConcurrent }
	resize := func(r replica, n int) {
		if _, err := r.ctl.Update("orders", control.Patch{MaxConcurrent: &n}, "test"); err != nil {
			t.Fatal(err)
		}
	}

	ahead := start(clock.NewFake(time.Now().Add(time.Hour))) // its clock is an hour ahead
	honest := start(clock.Real{})

	resize(ahead, 5) // first
	sync(ahead)
	sync(honest)
	if limit(honest) != 5 {
		t.Fatalf("the first change not applied at the other replica: %d", limit(honest))
	}
	resize(honest, 7) // then: this one is the latest
	sync(honest)
	sync(ahead)
	if a, h := limit(ahead), limit(honest); a != 7 || h != 7 {
		t.Fatalf("limits %d (clock ahead) and %d, want 7 at both: the last change written", a, h)
	}

	// And the other way round: the replica ahead changes it again, later.
	resize(ahead, 3)
	sync(ahead)
	sync(honest)
	if a, h := limit(ahead), limit(honest); a != 3 || h != 3 {
		t.Fatalf("limits %d (clock ahead) and %d, want 3 at both", a, h)
	}
}
