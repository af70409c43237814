package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/control"
)

// overrideSync carries admin overrides between replicas through Redis, so
// that a resize sent to one replica applies at every one: each change made
// here is written to the hash <key_prefix>overrides (bulkhead -> record),
// and every replica applies, each second, the records newer than the last
// it applied (the latest change wins, whichever replica took it). A
// replica that starts applies the overrides in force.
type overrideSync struct {
	rdb     redis.UniversalClient
	key     string
	ctl     *control.Control
	log     *slog.Logger
	events  chan overrideEvent
	pending map[string]overrideRecord // written here, not yet in Redis
	applied map[string]int64          // the At of the last record applied, by bulkhead
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
	At       int64              `json:"at"` // UnixNano
}

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

// run syncs until ctx ends.
func (o *overrideSync) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		o.flush(ctx)
		o.pull(ctx)
		select {
		case <-ctx.Done():
			return
		case ev := <-o.events:
			o.pending[ev.name] = ev.rec
			o.applied[ev.name] = ev.rec.At
		case <-t.C:
		}
	}
}

func (o *overrideSync) flush(ctx context.Context) {
	for name, rec := range o.pending {
		b, err := json.Marshal(rec)
		if err != nil {
			delete(o.pending, name)
			continue
		}
		if err := o.rdb.HSet(ctx, o.key, name, b).Err(); err != nil {
			return // Redis away: retried next time
		}
		delete(o.pending, name)
	}
}

func (o *overrideSync) pull(ctx context.Context) {
	all, err := o.rdb.HGetAll(ctx, o.key).Result()
	if err != nil {
		return
	}
	for name, raw := range all {
		var rec overrideRecord
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			o.log.Warn("shared override unreadable; ignored", "bulkhead", name, "err", err)
			continue
		}
		if rec.At <= o.applied[name] {
			continue
		}
		var ov *control.Override
		if rec.Settings != nil {
			ov = &control.Override{Settings: *rec.Settings, Actor: rec.Actor, At: time.Unix(0, rec.At)}
		}
		if err := o.ctl.ApplyRemote(name, ov); err != nil && !errors.Is(err, control.ErrNotFound) {
			o.log.Warn("override made at another replica not applied", "bulkhead", name, "err", err)
		}
		o.applied[name] = rec.At
	}
}
