package replication

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisledger"
)

// breakerSync makes each bulkhead's circuit breaker mesh-wide. Each
// replica reads only the access-log streams that reach it, so its breaker
// sees only their outcomes. Every round each replica writes its own window
// and last state change per breaker to the hash
// <key_prefix>{<bulkhead>}:breaker (one field per replica, in the
// bulkhead's slot), reads the others', and merges them in
// (breaker.Breaker.Merge): the windows add up toward opening, and one
// replica's opening, or closing after its probes succeeded, is every
// replica's within a round, as is an operator's mode (bulkheadctl circuit:
// the newest wins, and a replica that starts takes the one in force from
// the others). Each replica lets its own half-open probes through (up to
// half_open_probes each).
//
// A replica's field carries the time it was written, and a field older
// than the breaker's window and two rounds is left out (its replica
// stopped); the hash expires when no replica writes it. While Redis does
// not answer, each breaker decides on its own outcomes: the peers' windows
// are dropped (drop) when the store becomes unavailable, or a round trip
// fails, not kept as they last were.
type breakerSync struct {
	store Store
	set   *breaker.Set
	log   *slog.Logger
}

// breakerSyncEvery is how often breakers are shared: how late a failure at
// one replica counts at the others, at most.
const breakerSyncEvery = 250 * time.Millisecond

func (s *breakerSync) key(name string) string {
	return redisledger.Key(s.store.Prefix, name, "breaker")
}

// sync shares every breaker's window and last change, and merges the
// others' (rounds are every apart, now is the time of this one): one
// pipelined round trip for all of them. When it fails, the peers' windows
// are dropped and its error returned.
func (s *breakerSync) sync(ctx context.Context, now time.Time, every time.Duration) error {
	type item struct {
		name   string
		b      *breaker.Breaker
		window time.Duration
		mode   breaker.Mode
		all    *redis.MapStringStringCmd
	}
	var items []item
	pipe := s.store.Client.Pipeline()
	s.set.Each(func(name string, b *breaker.Breaker) {
		snap := b.Snapshot()
		window := snap.Settings.Window
		key := s.key(name)
		pipe.HSet(ctx, key, s.store.Replica, encodeShare(b.Local(), now))
		pipe.PExpire(ctx, key, window+4*every)
		items = append(items, item{name: name, b: b, window: window, mode: snap.Mode, all: pipe.HGetAll(ctx, key)})
	})
	if len(items) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		s.drop()
		return fmt.Errorf("circuit breakers: %w", err)
	}
	for _, it := range items {
		var peers []breaker.Share
		for replica, v := range it.all.Val() {
			if replica == s.store.Replica {
				continue
			}
			sh, written, err := decodeShare(v)
			if err != nil {
				s.log.Warn("circuit breaker share unreadable: ignored", "bulkhead", it.name, "replica", replica, "err", err)
				continue
			}
			if now.Sub(written) > it.window+2*every {
				continue // its replica stopped writing
			}
			peers = append(peers, sh)
		}
		it.b.Merge(peers)
		if m := it.b.Snapshot().Mode; m != it.mode {
			s.log.Info("circuit breaker mode set at another replica", "bulkhead", it.name, "before", it.mode.String(), "after", m.String())
		}
	}
	return nil
}

// drop makes each breaker decide on its own outcomes alone.
func (s *breakerSync) drop() { s.set.Each(func(_ string, b *breaker.Breaker) { b.Merge(nil) }) }

// leave removes this replica's fields, so that the others stop counting
// its window at once (a graceful stop).
func (s *breakerSync) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pipe := s.store.Client.Pipeline()
	s.set.Each(func(name string, _ *breaker.Breaker) { pipe.HDel(ctx, s.key(name), s.store.Replica) })
	_, _ = pipe.Exec(ctx) // best effort: the fields age out anyway
}

// encodeShare is a replica's field: "calls failed state at_ms mode
// mode_at_ms written_ms" (state and mode breaker.State and breaker.Mode
// numbers; a time 0 when unset).
func encodeShare(sh breaker.Share, written time.Time) string {
	return fmt.Sprintf("%d %d %d %d %d %d %d", sh.Calls, sh.Failed, sh.Entered, unixMilli(sh.At), sh.Mode, unixMilli(sh.ModeAt),
		written.UnixMilli())
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromUnixMilli(ms uint64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(ms))
}

func decodeShare(v string) (breaker.Share, time.Time, error) {
	f := strings.Fields(v)
	if len(f) != 7 {
		return breaker.Share{}, time.Time{}, fmt.Errorf("%q: want 7 fields", v)
	}
	var n [7]uint64
	for i, s := range f {
		x, err := strconv.ParseUint(s, 10, 63)
		if err != nil {
			return breaker.Share{}, time.Time{}, fmt.Errorf("%q: field %d: %w", v, i+1, err)
		}
		n[i] = x
	}
	if n[2] > uint64(breaker.HalfOpen) {
		return breaker.Share{}, time.Time{}, fmt.Errorf("%q: no state %d", v, n[2])
	}
	if n[4] > uint64(breaker.ForceClosed) {
		return breaker.Share{}, time.Time{}, fmt.Errorf("%q: no mode %d", v, n[4])
	}
	sh := breaker.Share{Calls: n[0], Failed: n[1], Entered: breaker.State(n[2]), At: fromUnixMilli(n[3]),
		Mode: breaker.Mode(n[4]), ModeAt: fromUnixMilli(n[5])}
	return sh, fromUnixMilli(n[6]), nil
}
