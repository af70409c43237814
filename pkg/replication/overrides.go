package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/control"
)

// overrideSync carries admin overrides between replicas through Redis, so
// that a resize sent to one replica applies at every one: each change made
// here is written to the hash <key_prefix>overrides (bulkhead -> record)
// at once (or, while Redis does not answer, when it answers again), and
// every replica applies, each second, the records written after the last
// it applied. The order is Redis's, never the replicas' clocks: each
// write stamps its record with Redis's TIME (above the stamp of the record
// it replaces), so the change written last wins at every replica,
// whichever replica took it. A replica that starts applies the overrides
// in force.
//
// sink may be called from any goroutine; the rest belongs to Run's.
type overrideSync struct {
	rdb     redis.UniversalClient
	key     string
	log     *slog.Logger
	events  chan overrideEvent
	pending map[string]overrideRecord // made here, not yet in Redis (pull leaves these alone)
	applied map[string]int64          // the stamp of the last record applied or written, by bulkhead
}

type overrideEvent struct {
	name string
	rec  overrideRecord
}

// overrideRecord is one bulkhead's latest override, or its reset (nil
// Settings), as stored in Redis.
type overrideRecord struct {
	Settings *bulkhead.Settings `json:"settings,omitempty"`
	Actor    string             `json:"actor"`
	At       int64              `json:"at"` // UnixNano, on the clock of the replica that took it
	// Stamp orders the records: microseconds on Redis's clock, set by
	// writeOverride (0 in a record of a replica that predates it).
	Stamp int64 `json:"stamp,omitempty"`
}

// order is rec's place among the changes of its bulkhead.
func (rec overrideRecord) order() int64 {
	if rec.Stamp == 0 {
		return rec.At / 1000 // the writer's clock: the best a record without a stamp offers
	}
	return rec.Stamp
}

// writeOverride stores the record ARGV[2] (JSON, without a stamp) of
// bulkhead ARGV[1] in the hash KEYS[1], stamped first with Redis's TIME in
// microseconds, or one above the stamp of the record it replaces if that
// is not less (a master whose clock is behind the last one's), and returns
// the stamp.
var writeOverride = redis.NewScript(`
local t = redis.call('TIME')
local stamp = tonumber(t[1]) * 1000000 + tonumber(t[2])
local prev = tonumber(string.match(redis.call('HGET', KEYS[1], ARGV[1]) or '', '^{"stamp":(%d+),')) or 0
if stamp <= prev then stamp = prev + 1 end
redis.call('HSET', KEYS[1], ARGV[1], '{"stamp":' .. string.format('%d', stamp) .. ',' .. string.sub(ARGV[2], 2))
return stamp
`)

func newOverrideSync(rdb redis.UniversalClient, prefix string, log *slog.Logger) *overrideSync {
	return &overrideSync{rdb: rdb, key: prefix + "overrides", log: log, events: make(chan overrideEvent, 256),
		pending: map[string]overrideRecord{}, applied: map[string]int64{}}
}

// sink is the Control's OverrideSink: it never blocks.
func (o *overrideSync) sink(name string, ov *control.Override) {
	rec := overrideRecord{At: time.Now().UnixNano()}
	if ov != nil {
		s := ov.Settings
		rec.Settings, rec.Actor, rec.At = &s, ov.Actor, ov.At.UnixNano()
	}
	select {
	case o.events <- overrideEvent{name, rec}:
	default:
		o.log.Warn("override not shared with the other replicas: too many at once", "bulkhead", name)
	}
}

// take records a change made here, to be written by the next flush.
func (o *overrideSync) take(ev overrideEvent) {
	o.pending[ev.name] = ev.rec
}

// flush writes the changes made here; one that Redis did not take is
// kept for the next flush.
func (o *overrideSync) flush(ctx context.Context) error {
	for name, rec := range o.pending {
		b, err := json.Marshal(rec)
		if err != nil {
			delete(o.pending, name)
			continue
		}
		stamp, err := writeOverride.Run(ctx, o.rdb, []string{o.key}, name, b).Int64()
		if err != nil {
			return fmt.Errorf("admin override of %s: %w", name, err)
		}
		delete(o.pending, name)
		o.applied[name] = stamp
	}
	return nil
}

// pull applies to apply the records written at the other replicas since
// the last it applied.
func (o *overrideSync) pull(ctx context.Context, apply Applier) error {
	all, err := o.rdb.HGetAll(ctx, o.key).Result()
	if err != nil {
		return fmt.Errorf("admin overrides: %w", err)
	}
	for name, raw := range all {
		var rec overrideRecord
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			o.log.Warn("shared override unreadable; ignored", "bulkhead", name, "err", err)
			continue
		}
		if _, mine := o.pending[name]; mine || rec.order() <= o.applied[name] {
			continue
		}
		var ov *control.Override
		if rec.Settings != nil {
			ov = &control.Override{Settings: *rec.Settings, Actor: rec.Actor, At: time.Unix(0, rec.At)}
		}
		if err := apply.ApplyRemote(name, ov); err != nil && !errors.Is(err, control.ErrNotFound) {
			o.log.Warn("override made at another replica not applied", "bulkhead", name, "err", err)
		}
		o.applied[name] = rec.order()
	}
	return nil
}
