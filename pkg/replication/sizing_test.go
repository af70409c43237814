package replication

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// Two replicas on one Redis, each hearing half of catalog's requests (40 a
// second each, holding 100 ms): a suggestion at either counts both halves
// (80/s, Little 8), not its own (40/s, Little 4). An unreadable field is
// logged and left out; a Redis that does not answer refuses the
// suggestion.
func TestSizingShareMeshWide(t *testing.T) {
	srv := testkit.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	fc := clock.NewFake(time.Now().Truncate(time.Second))
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var ledger ledgerState
	newReplica := func(id string) (*sizing.Observer, *sizingShare) {
		o := sizing.New(fc)
		sh := &sizingShare{store: Store{Client: rdb, Prefix: "t:", Replica: id}, obs: o, state: ledger.get, log: log, timeout: time.Second}
		o.SetPeers(sh)
		return o, sh
	}
	a, shA := newReplica("a")
	b, shB := newReplica("b")
	for range 20 {
		for range 40 {
			a.Ended("catalog", bulkhead.Success, 100*time.Millisecond)
			b.Ended("catalog", bulkhead.Success, 100*time.Millisecond)
		}
		for _, sh := range []*sizingShare{shA, shB} {
			if err := sh.write(ctx, fc.Now().Unix()); err != nil {
				t.Fatal(err)
			}
		}
		fc.Advance(time.Second)
	}
	p := sizing.Params{Window: 30 * time.Second, MinRequests: 100}.Defaults()
	s, err := a.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 50}, p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 1600 || s.Throughput != 80 || s.MeanHold != 100*time.Millisecond || s.Little != 8 {
		t.Fatalf("a's suggestion %+v, want both replicas' 1600 requests, 80/s, Little 8", s)
	}
	if s, err := b.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 50}, p); err != nil || s.Throughput != 80 {
		t.Fatalf("b's suggestion %+v %v, want 80/s", s, err)
	}

	if err := rdb.HSet(ctx, shA.key("catalog", fc.Now().Unix()-5), "broken", "7 x").Err(); err != nil {
		t.Fatal(err)
	}
	if s, err := a.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 50}, p); err != nil || s.Requests != 1600 {
		t.Fatalf("with an unreadable field: %+v %v, want it left out", s, err)
	}
	if !strings.Contains(logs.String(), "sizing counts unreadable") {
		t.Errorf("the unreadable field is not logged:\n%s", logs.String())
	}

	// Refused while the ledger finds Redis unavailable, without asking it,
	// and when a read fails before the ledger noticed.
	ledger.set(admission.Unavailable)
	if _, err := a.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 50}, p); !errors.Is(err, ErrUnavailable) {
		t.Errorf("suggestion with the ledger unavailable: %v, want refused (ErrUnavailable)", err)
	}
	ledger.set(admission.Strict)
	srv.Kill()
	if _, err := a.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 50}, p); err == nil || !strings.Contains(err.Error(), "other replicas") {
		t.Errorf("suggestion without Redis: %v, want refused", err)
	}
}
