package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisledger"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
)

// sizingShare makes `bulkheadctl suggest` mesh-wide. Each replica hears
// only the access-log streams that reach it, so it knows only its share of
// each bulkhead's requests: sized from that alone, a suggestion would fall
// short by the number of replicas. Every second each replica writes the
// requests that ended here in the last two seconds (the current one grows
// until it is over) to <key_prefix>{<bulkhead>}:sizing:<unix second>, one
// field per replica ("requests hold_us"), kept for sizing.History; a
// suggestion adds up the others' fields of the seconds in its window
// (sizing.Peers). A suggestion asked while Redis does not answer is
// refused, not made from one share. Safe for concurrent use (Ended is
// called by the admin API, write by Run).
type sizingShare struct {
	store   Store
	obs     *sizing.Observer
	state   func() admission.State
	log     *slog.Logger
	timeout time.Duration // of a suggestion's read
}

var _ sizing.Peers = (*sizingShare)(nil)

// ErrUnavailable is the answer of what needs the other replicas while the
// Redis ledger does not answer.
var ErrUnavailable = errors.New("the redis ledger does not answer")

func (s *sizingShare) key(name string, sec int64) string {
	return redisledger.Key(s.store.Prefix, name, "sizing:"+strconv.FormatInt(sec, 10))
}

// write shares the requests that ended here in the second now and the one
// before it.
func (s *sizingShare) write(ctx context.Context, now int64) error {
	pipe := s.store.Client.Pipeline()
	n := 0
	for _, name := range s.obs.Names() {
		for sec, c := range s.obs.Local(name, now-1, now) {
			key := s.key(name, sec)
			pipe.HSet(ctx, key, s.store.Replica, fmt.Sprintf("%d %d", c.Requests, c.Hold.Microseconds()))
			pipe.Expire(ctx, key, sizing.History+time.Minute)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("sizing counts: %w", err)
	}
	return nil
}

// Ended returns the requests of bulkhead name that ended at the other
// replicas, by second, in [from, to]: one pipelined read.
func (s *sizingShare) Ended(name string, from, to int64) (map[int64]sizing.Counts, error) {
	if s.state() == admission.Unavailable {
		return nil, ErrUnavailable
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	pipe := s.store.Client.Pipeline()
	cmds := make(map[int64]*redis.MapStringStringCmd, to-from+1)
	for sec := from; sec <= to; sec++ {
		cmds[sec] = pipe.HGetAll(ctx, s.key(name, sec))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redis: %w", err)
	}
	out := map[int64]sizing.Counts{}
	for sec, cmd := range cmds {
		var sum sizing.Counts
		for replica, v := range cmd.Val() {
			if replica == s.store.Replica {
				continue
			}
			c, err := decodeCounts(v)
			if err != nil {
				s.log.Warn("sizing counts unreadable: ignored", "bulkhead", name, "second", sec, "replica", replica, "err", err)
				continue
			}
			sum.Requests += c.Requests
			sum.Hold += c.Hold
		}
		if sum.Requests > 0 {
			out[sec] = sum
		}
	}
	return out, nil
}

func decodeCounts(v string) (sizing.Counts, error) {
	f := strings.Fields(v)
	if len(f) != 2 {
		return sizing.Counts{}, fmt.Errorf("%q: want 2 fields", v)
	}
	n, err := strconv.ParseUint(f[0], 10, 63)
	if err != nil {
		return sizing.Counts{}, fmt.Errorf("%q: requests: %w", v, err)
	}
	us, err := strconv.ParseUint(f[1], 10, 63)
	if err != nil {
		return sizing.Counts{}, fmt.Errorf("%q: hold: %w", v, err)
	}
	return sizing.Counts{Requests: n, Hold: time.Duration(us) * time.Microsecond}, nil
}

// GlobalSampler samples each bulkhead's permits in use across the mesh
// (the Redis ledger's global count, refreshed each ledger tick), for
// sizing: this process's own limiters hold nothing while Redis decides.
type GlobalSampler struct {
	keys   func() []string
	global func(name string) (admission.Global, bool)
}

var _ sizing.Sampler = GlobalSampler{}

// NewGlobalSampler samples the bulkheads keys returns, global telling
// their counts.
func NewGlobalSampler(keys func() []string, global func(name string) (admission.Global, bool)) GlobalSampler {
	return GlobalSampler{keys: keys, global: global}
}

// Keys implements sizing.Sampler.
func (g GlobalSampler) Keys() []string { return g.keys() }

// InUse implements sizing.Sampler.
func (g GlobalSampler) InUse(key string) (int, int, bool) {
	v, ok := g.global(key)
	if !ok {
		return 0, 0, true // not looked at yet: none known in use
	}
	return v.InUse, v.InUse, true
}

// sizingReadTimeout bounds a suggestion's read of the other replicas'
// counts (one pipelined read of up to sizing.History seconds).
const sizingReadTimeout = 2 * time.Second
