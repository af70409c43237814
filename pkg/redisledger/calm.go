package redisledger

import (
	"hash/fnv"
	"sync"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
)

// lookEvery is how many ticks apart the ticker looks at a calm bulkhead
// (state.lua): one whose last look found no per-request permit in use, no
// waiter (in the queue or a tenant's compartment), no recovery window and
// nothing expired. Such a bulkhead has nothing for the look to do in Redis
// but put drifted counts right and refresh the global counts (Global);
// every script that could find work there sweeps and pumps on its own
// (acquire, release, renew, lease), and this replica's own arrivals and
// adoptions stir it (looked at each tick again). So a mesh of many quiet
// bulkheads costs Redis one look per bulkhead per lookEvery ticks per
// replica instead of one per tick: with 51 bulkheads, a tenth of a
// millisecond of Redis CPU a tick instead of about 3.
//
// What it costs: a calm bulkhead's global counts, in the metrics and the
// admin API, may lag up to lookEvery ticks (5 s by default) behind other
// replicas' per-request grants, which those replicas' own looks see each
// tick; a capacity lease held here refreshes them at each renewal. And the
// permits of a replica that died right after granting them, in a bulkhead
// no replica then touches, are swept up to lookEvery ticks later than the
// heartbeat TTL: nothing waits for them then (any Check that wants the
// capacity runs a script that sweeps first).
const lookEvery = 5

// calm keeps which bulkheads the ticker may look at less often. A look's
// answer makes a bulkhead calm only if nothing stirred it since the look
// was sent (gen), so that an arrival racing a look is never lost.
type calm struct {
	mu    sync.Mutex
	round uint64
	epoch uint64            // bumped by stirAll
	quiet map[string]bool   // bulkhead -> its last look found it calm
	stirs map[string]uint64 // bulkhead -> times stirred
}

func newCalm() calm { return calm{quiet: map[string]bool{}, stirs: map[string]uint64{}} }

// stir marks bulkhead name as having work in Redis: the ticker looks at it
// each tick until a look finds it calm again.
func (c *calm) stir(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.quiet, name)
	c.stirs[name]++
}

// stirAll stirs every bulkhead (Redis answers again, or lost its state).
func (c *calm) stirAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.quiet)
	c.epoch++
}

// due returns the bulkheads of names the ticker looks at this tick: those
// not calm, and each calm one every lookEvery ticks (spread over the ticks
// by its name, so that a tick looks at about a lookEvery-th of them).
func (c *calm) due(names []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.round++
	out := names[:0:0]
	for _, n := range names {
		if !c.quiet[n] || (spread(n)+c.round)%lookEvery == 0 {
			out = append(out, n)
		}
	}
	return out
}

func spread(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64()
}

// lookGen is when a look was sent, for looked.
type lookGen struct{ epoch, stirs uint64 }

// gens returns names' generations as a look sends them.
func (c *calm) gens(names []string) []lookGen {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := make([]lookGen, len(names))
	for i, n := range names {
		g[i] = lookGen{c.epoch, c.stirs[n]}
	}
	return g
}

// looked takes a look's verdict on bulkhead name, sent at g: calm (quiet)
// only if nothing stirred it since.
func (c *calm) looked(name string, g lookGen, quiet bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if quiet && g == (lookGen{c.epoch, c.stirs[name]}) {
		c.quiet[name] = true
	} else if !quiet {
		delete(c.quiet, name)
	}
}

// isCalm reports whether bulkhead name is calm.
func (c *calm) isCalm(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.quiet[name]
}

// leased takes what a capacity lease's renewal found of bulkhead name
// (lease.lua's counts): work in Redis stirs it; otherwise a calm
// bulkhead's global counts are the lease's, fresher than its last look.
func (l *Ledger) leased(name string, inUse, perRequest, queued, recovering int64) {
	if perRequest > 0 || queued > 0 || recovering > 0 {
		l.calm.stir(name)
		return
	}
	if l.calm.isCalm(name) {
		l.setGlobal(name, admission.Global{InUse: int(inUse)})
	}
}
