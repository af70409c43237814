package shares

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// Mode says how a bulkhead admits.
type Mode uint8

// The modes.
const (
	// Strict admits every request with an ext_authz permit (no share).
	Strict Mode = iota
	// Shares admits within each Envoy's share, always.
	Shares
	// Auto hands out shares far from the limit and switches to strict
	// permits near it (SwitchToStrict, SwitchToShares).
	Auto
)

var modeNames = [...]string{"strict", "shares", "auto"}

// String returns the mode's configuration name.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode maps "strict", "shares" or "auto" to its mode.
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if s == n {
			return Mode(i), nil
		}
	}
	return Strict, fmt.Errorf("mode %q (want strict, shares or auto)", s)
}

// The thresholds of mode auto, as fractions of the bulkhead's limit: it
// switches to strict when demand (the requests its Envoys report in
// flight, plus its strict permits) reaches SwitchToStrict, and back to
// shares when demand has stayed at or below SwitchToShares for
// CalmRounds rounds. Far from the limit (up to half of it, where shares
// must carry the load at no rejection) a share holds its Envoy's demand
// plus an equal part of half the slack (a lone Envoy: all of the limit
// but loneReserve); at three quarters that part is
// an eighth of the limit over the Envoys, the least headroom that still
// absorbs a round's growth at one Envoy, and past it the global queue,
// priorities and reserves decide. The gap down to half keeps a load that
// hovers near one threshold from flapping.
const (
	SwitchToStrict = 0.75
	SwitchToShares = 0.5
	CalmRounds     = 3
)

// loneReserve is what a lone Envoy's share leaves free of a bulkhead
// whose ceiling (its limit less the critical reserve) is ceiling: an
// eighth, at least one permit. It serves strict requests (an Envoy with no
// layer yet, a route without a share route) and a newcomer's first share
// in the interval or two a lone share takes to shrink for it. An eighth is
// the headroom the Envoys' parts add up to at mode auto's switch
// (SwitchToStrict): the least that absorbs a round's growth at one Envoy.
func loneReserve(ceiling int) int { return max(1, (ceiling+7)/8) }

// Policy is one bulkhead's shares configuration.
type Policy struct {
	Mode Mode
	// Cluster is the Envoy cluster of the bulkhead's share route: its
	// circuit breaker is the share.
	Cluster string
}

// Settings are the shares settings common to every bulkhead.
type Settings struct {
	// TTL is the runtime layer's TTL at the Envoy: hearing nothing for this
	// long, it drops its shares and runs strict. Heartbeats go every TTL/3.
	TTL time.Duration
	// MaxRequest bounds how long a request admitted under a share runs: the
	// share route's timeout in Envoy. A share outlives its Envoy's layer by
	// this much.
	MaxRequest time.Duration
	// Interval is how often shares follow demand, and the Envoys' load
	// report interval.
	Interval time.Duration
	// Layer is the name of the RTDS resource (the Envoy's rtds_layer name).
	Layer string
}

// Defaults of Settings.
const (
	DefaultTTL        = 3 * time.Second
	DefaultMaxRequest = 5 * time.Second
	DefaultInterval   = time.Second
	DefaultLayer      = "bulkhead"
)

// driftMargin is the margin for clock-rate drift between the daemon and an
// Envoy over a share's tail (TTL + MaxRequest), plus network delay.
const (
	driftMargin = 0.05
	delayMargin = 250 * time.Millisecond
)

// StrictKey is the runtime key that gates bulkhead's strict route: 100
// (its default in the static layer) routes every request through
// ext_authz; 0 routes them to the share route.
func StrictKey(bulkheadName string) string { return "bulkhead.strict." + bulkheadName }

// DefaultCluster is the share cluster of a bulkhead whose configuration
// names none: the bulkhead's name and "_shares".
func DefaultCluster(bulkheadName string) string { return bulkheadName + "_shares" }

// ShareKey is the runtime key of cluster's share: its default circuit
// breaker's max_requests.
func ShareKey(cluster string) string { return "circuit_breakers." + cluster + ".default.max_requests" }

// CriticalCluster is the share cluster of a bulkhead's critical routes,
// whose share cluster is cluster: cluster and "_critical". Its DEFAULT
// circuit breaker is the critical share, apart from the normal one, so
// that each class's requests in flight are reported apart (LRS counts per
// cluster, not per route priority: checked against Envoy 1.40).
func CriticalCluster(cluster string) string { return cluster + "_critical" }

// CriticalStrictKey is the runtime key that gates bulkhead's critical
// strict route, as StrictKey does the others: a critical route runs strict
// while its Envoy holds no critical share, whatever the normal share.
func CriticalStrictKey(bulkheadName string) string {
	return "bulkhead.strict_critical." + bulkheadName
}

// A share is one of a bulkhead's two units in an Envoy: the normal share
// (the unit is the bulkhead's name), and the critical share (the name and
// criticalSuffix), held at priority critical. Units key an Envoy's shares
// and name them in a layer's version; '!' is in no bulkhead name.
const criticalSuffix = "!critical"

func criticalUnit(bulkheadName string) string { return bulkheadName + criticalSuffix }

// unitOf returns the bulkhead of unit u and whether u is its critical share.
func unitOf(u string) (bulkheadName string, critical bool) {
	return strings.CutSuffix(u, criticalSuffix)
}

// bulkheadOf returns the bulkhead of unit u.
func bulkheadOf(u string) string {
	name, _ := unitOf(u)
	return name
}

// strictKeyOf is the runtime key that gates unit u's strict route.
func strictKeyOf(u string) string {
	if name, critical := unitOf(u); critical {
		return CriticalStrictKey(name)
	}
	return StrictKey(u)
}

// Limiters finds a bulkhead's limiter; *bulkhead.Registry is one.
type Limiters interface {
	Get(key string) *bulkhead.Limiter
}

// Lender is where a bulkhead's limiters get their capacity when it is not
// this process's to give: the Redis ledger's capacity leases
// (redisledger.Capacity, whose Local registry is then the Limiters). A
// share is held from the replica's lease, and Redis must count it as long
// as its Envoy may use it.
type Lender interface {
	// Backs reports whether bulkhead name's lease may back shares now: it
	// is live, and Redis keeps it at least keep after its end (the
	// shares' Tail: an Envoy may use its share that long after this
	// process's last word, and this process may be cut off or die).
	Backs(name string, keep time.Duration) bool
	// Far reports whether the mesh is far from bulkhead name's limit (the
	// lease was granted so): mode auto hands out shares only then.
	Far(name string) bool
}

// Manager keeps the shares of every Envoy and bulkhead.
type Manager struct {
	set      Settings
	limiters Limiters
	lender   Lender
	clock    clock.Clock
	log      *slog.Logger
	boot     string // this process's start, in every version

	mu        sync.Mutex
	policies  map[string]Policy // bulkheads in mode shares or auto
	byCluster map[string]string // share cluster -> unit (bulkhead, or its critical share)
	clusters  []string          // byCluster's keys, sorted: what the Envoys report
	states    map[string]*modeState
	requests  map[string]*[2]uint64 // by bulkhead: admitted and turned away under shares (LRS)
	nodes     map[string]*node
	orphans   []orphan
	seq       uint64
}

// modeState is the mode a bulkhead in mode auto runs in.
type modeState struct {
	strict   bool
	calm     int
	switches [2]uint64 // to strict, to shares
}

// orphan is the share of an Envoy process that is gone (a new process
// took its node id): kept until it cannot be used any more.
type orphan struct {
	node  string
	unit  string // the bulkhead, or its critical share
	held  []bulkhead.Permit
	until time.Time
}

// New returns a manager of shares over limiters.
func New(set Settings, limiters Limiters, clk clock.Clock, log *slog.Logger) *Manager {
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if set.Layer == "" {
		set.Layer = DefaultLayer
	}
	return &Manager{
		set: set, limiters: limiters, clock: clk, log: log,
		boot:     fmt.Sprintf("%x", clk.Now().UnixNano()),
		policies: map[string]Policy{}, byCluster: map[string]string{}, states: map[string]*modeState{}, requests: map[string]*[2]uint64{},
		nodes: map[string]*node{},
	}
}

// Settings returns the manager's settings.
func (m *Manager) Settings() Settings { return m.set }

// Lend makes the manager hold shares from l's leases (its limiters are
// then the leases' local ones): a bulkhead's shares are handed out only
// while l backs them (Lender.Backs), and in mode auto only while l is far
// from the limit. Call it before the manager serves.
func (m *Manager) Lend(l Lender) { m.lender = l }

// Keep is how long after this process's last word an Envoy may use a
// share of bulkhead name: the Tail while the bulkhead is in mode shares
// or auto or any permit is held for its shares, else 0 (redisledger.Shares:
// how long Redis keeps the lease after its end).
func (m *Manager) Keep(name string) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ever := m.states[name]; !ever {
		return 0 // never in mode shares or auto: nothing held (and no walk over the Envoys)
	}
	if _, on := m.policies[name]; on || m.heldLocked(name)+m.heldLocked(criticalUnit(name)) > 0 {
		return m.Tail()
	}
	return 0
}

// LeaseUse returns the permits held for bulkhead name's shares and what
// their Envoys use: a live Envoy's demand (its peak in flight plus what its
// circuit breakers turned away, over its last reports), and the whole of
// what a silent Envoy or a replaced process holds (unknown: counted in
// use). A capacity lease reports that as its demand (redisledger.Shares).
func (m *Manager) LeaseUse(name string) (held, used int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ever := m.states[name]; !ever {
		return 0, 0
	}
	for _, n := range m.nodes {
		for _, u := range [...]string{name, criticalUnit(name)} {
			s := n.shares[u]
			if s == nil {
				continue
			}
			held += len(s.held)
			if n.live() {
				used += n.demand(s.cluster)
			} else {
				used += len(s.held)
			}
		}
	}
	for _, o := range m.orphans {
		if bulkheadOf(o.unit) == name {
			held += len(o.held)
			used += len(o.held)
		}
	}
	return held, used
}

// unbackedLocked withdraws n's shares of bulkheads whose lease no longer
// backs them (Lend), before a response carries them: a layer sent after
// the lease's end could outlive what Redis keeps.
func (m *Manager) unbackedLocked(n *node) {
	if m.lender == nil {
		return
	}
	tail := m.Tail()
	for u, s := range n.shares {
		if s.limit > 0 && !m.lender.Backs(bulkheadOf(u), tail) {
			s.strict, s.limit = true, 0
		}
	}
}

// Apply sets the bulkheads in mode shares or auto (the others are strict).
// A bulkhead that leaves them goes strict: its Envoys are told, and their
// shares drain as usual.
func (m *Manager) Apply(policies map[string]Policy) {
	m.mu.Lock()
	defer m.mu.Unlock()
	next := map[string]Policy{}
	for name, p := range policies {
		if p.Mode == Strict {
			continue
		}
		next[name] = p
		if m.states[name] == nil {
			m.states[name] = &modeState{}
		}
	}
	m.policies = next
	m.indexLocked()
	m.wakeAllLocked()
}

// indexLocked sets the share clusters the Envoys report: those of the
// bulkheads in mode shares or auto, and those of the shares that still
// hold permits after their bulkhead left them (config reload): their
// permits come back as their Envoys report them drained, so their reports
// are still wanted (without them the last in-flight count was kept, and
// its permits with it, for as long as the Envoy stayed connected).
func (m *Manager) indexLocked() {
	byCluster := map[string]string{}
	for name, p := range m.policies {
		byCluster[p.Cluster] = name
		byCluster[CriticalCluster(p.Cluster)] = criticalUnit(name)
	}
	for _, n := range m.nodes {
		for u, s := range n.shares {
			if _, taken := byCluster[s.cluster]; !taken && s.cluster != "" && len(s.held) > 0 {
				byCluster[s.cluster] = u
			}
		}
	}
	m.byCluster, m.clusters = byCluster, slices.Sorted(maps.Keys(byCluster))
}

// Tail is how long after the last response an Envoy can have received
// its share may still be in use: the layer's TTL, then the share route's
// timeout, with margins for clock-rate drift and delay.
func (s Settings) Tail() time.Duration {
	return time.Duration(float64(s.TTL+s.MaxRequest)*(1+driftMargin)) + delayMargin
}

// Tail is the settings' Tail.
func (m *Manager) Tail() time.Duration { return m.set.Tail() }

// Round makes every share follow its Envoy's demand and releases what
// may be released. Run calls it every Interval.
func (m *Manager) Round() {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	m.expireLocked(now)
	for _, name := range slices.Sorted(maps.Keys(m.policies)) {
		m.roundLocked(name, m.policies[name], now)
	}
	for _, n := range m.nodes {
		n.now = now
		for u, s := range n.shares {
			if _, on := m.policies[bulkheadOf(u)]; !on {
				s.strict, s.limit = true, 0 // the bulkhead left shares mode
			}
		}
		m.settleLocked(n)
		if n.dirty() {
			n.wake()
		}
		n.wakeLRS()
	}
	m.indexLocked()
}

// roundLocked sizes every live Envoy's shares of bulkhead name: its
// critical share, if its Envoy has the critical share cluster (it names it
// in its load reports), then its normal share.
func (m *Manager) roundLocked(name string, p Policy, now time.Time) {
	l := m.limiters.Get(name)
	if l == nil {
		return
	}
	snap := l.Snapshot()
	limit := snap.Settings.MaxConcurrent
	crit, critUnit := CriticalCluster(p.Cluster), criticalUnit(name)
	var live, liveCrit []*node
	held, inflight := 0, 0
	for _, n := range m.nodes {
		held += n.held(name) + n.held(critUnit)
		if n.live() {
			live = append(live, n)
			// What its circuit breakers turned away is demand too: without
			// it, demand at a share that is too small never reaches the
			// switch.
			inflight += n.inflight[p.Cluster] + n.dropped[p.Cluster] + n.inflight[crit] + n.dropped[crit]
			if n.reported(crit) {
				liveCrit = append(liveCrit, n)
			}
		}
	}
	for _, o := range m.orphans {
		if bulkheadOf(o.unit) == name {
			held += len(o.held)
		}
	}
	strictInUse := max(0, snap.InUse-held)
	demand := inflight + strictInUse
	st := m.states[name]
	// Mode auto goes strict near the limit, back after CalmRounds calm
	// rounds. On capacity leases (Lend) a share is held from this
	// replica's lease, which Redis sizes to the replica's demand (twice
	// it far from the limit, its peak near it): demand against the lease
	// says how far the lease is from growing, not the mesh from its limit.
	// There mode auto follows Redis's own judgement (Far: the mesh's demand
	// at most half the limit, no waiter), and no share is handed out while
	// the lease cannot back it.
	near := float64(demand) >= SwitchToStrict*float64(limit)
	calm := float64(demand) <= SwitchToShares*float64(limit)
	backed := true
	if m.lender != nil {
		far := m.lender.Far(name)
		backed, near, calm = m.lender.Backs(name, m.Tail()), !far, far
	}
	switch {
	case p.Mode == Shares:
		st.strict = false
	case !st.strict && near:
		st.strict, st.calm = true, 0
		st.switches[0]++
		m.log.Info("bulkhead switches to strict permits", "bulkhead", name, "demand", demand, "limit", limit)
	case st.strict && calm:
		if st.calm++; st.calm >= CalmRounds {
			st.strict, st.calm = false, 0
			st.switches[1]++
			m.log.Info("bulkhead switches to shares", "bulkhead", name, "demand", demand, "limit", limit)
		}
	case st.strict:
		st.calm = 0
	}
	// Critical shares first, held at priority critical: they may use the
	// critical reserve, which normal shares never take (below). Each follows its Envoy's critical demand as a
	// normal share does, with an equal part of the reserve as its headroom
	// (the reserve is critical's: idle, it is where a critical step goes;
	// half of it overflowed at a step from 0 to 2 in flight, in e2e):
	// target max(demand + part, 2 x demand, 1).
	reserve := limit - snap.Settings.Ceiling(bulkhead.Normal)
	critPart := 0
	if len(liveCrit) > 0 {
		critPart = reserve / len(liveCrit)
	}
	slices.SortFunc(liveCrit, func(a, b *node) int { return b.inflight[crit] - a.inflight[crit] })
	for _, n := range liveCrit {
		s := n.share(critUnit)
		s.cluster, s.strict = crit, st.strict || n.duplicate || !backed
		if s.strict {
			s.limit = 0
			continue
		}
		use := n.demand(crit)
		target := max(use+critPart, 2*use, 1)
		if target <= s.limit && smallShrink(target, s.limit) {
			continue // within a quarter (or a permit) below: no push for that
		}
		s.resize(func(k int) []bulkhead.Permit { return l.Hold(bulkhead.Critical, k) }, target)
	}
	// Normal shares never hold more than normal's ceiling (the limit less
	// the critical reserve) with the strict permits in use: they are taken
	// while fewer than the ceiling plus the permits held for critical
	// shares are in use (Limiter.HoldWithin). A critical share's headroom
	// then sits in the reserve, where Hold(Normal) would count it against
	// normal's ceiling like a critical request in flight (a critical share
	// of 8 for 2 in flight kept the normal share at 8 of a ceiling of 15).
	critHeld := m.heldLocked(critUnit)
	normalCap := snap.Settings.Ceiling(bulkhead.Normal) + critHeld
	ceiling := snap.Settings.Ceiling(bulkhead.Normal)
	slack := max(0, ceiling-demand)
	part := 0
	if len(live) > 0 {
		part = slack / (2 * len(live))
	}
	// The half of the slack no share gets is the free pool: a step at any
	// Envoy is covered from it at the next round, where a share taken from
	// another Envoy comes back only after that Envoy has acknowledged its
	// smaller share and reported twice (an interval or more). A lone
	// Envoy's steps are covered as well by a share that holds the pool; the
	// pool then only serves strict requests and a newcomer until the lone
	// share shrinks for it, for which the reserve is kept. So a lone Envoy
	// is lent everything but the reserve (lend): bursts above a share of
	// half the slack were turned away while the mesh had room.
	lone, lend := len(live) == 1, 0
	if lone {
		// Everything in use but its own normal share and the critical
		// shares (strict permits, other normal shares) is not to lend.
		own := live[0].held(name)
		lend = ceiling - (l.Snapshot().InUse - own - critHeld) - loneReserve(ceiling)
	}
	// The Envoys that use the most grow first.
	slices.SortFunc(live, func(a, b *node) int { return b.inflight[p.Cluster] - a.inflight[p.Cluster] })
	for _, n := range live {
		s := n.share(name)
		s.cluster, s.strict = p.Cluster, st.strict || n.duplicate || !backed
		if s.strict {
			s.limit = 0
			continue
		}
		// Demand: the peak over the last few reports of the requests in
		// flight plus the concurrency of those its circuit breaker turned
		// away (LRS total_dropped_requests; turnedAway): an Envoy at its
		// share wants them too.
		use := n.demand(p.Cluster)
		target := max(use+part, 2*use, 1)
		if lone {
			target = max(target, lend)
		}
		// Within a quarter below: no push for that; but a lone share that
		// grew into more than half the reserve (2 x its demand after a
		// burst) gives it back once the burst has left its last reports.
		half := lend + loneReserve(ceiling)/2
		restore := lone && s.limit > half && target <= half
		if target <= s.limit && smallShrink(target, s.limit) && !restore {
			continue
		}
		s.resize(func(k int) []bulkhead.Permit { return l.HoldWithin(bulkhead.Normal, k, normalCap) }, target)
	}
	// A node that is not live keeps what it holds; it is told nothing.
}

// smallShrink reports whether a share of limit is left as it is for a
// smaller target: by less than a quarter, or by a single permit. A push, its
// acknowledgement and the Envoy's fast load reports until the permits come
// back cost more than a permit held idle; small shares (a few permits, as
// many Envoys on many bulkheads get) shrank by one at each swing of their
// demand: 50 bulkheads x 100 Envoys on capacity leases (shares of 2-4)
// sent 3.5x the load reports of the same mesh with shares of 5-7.
func smallShrink(target, limit int) bool { return 4*target >= 3*limit || limit-target <= 1 }

// resize makes s a share of target requests, taking permits with hold
// first (a share that cannot get them all is as large as what it holds;
// what it holds beyond comes back as its Envoy reports it drained). No
// capacity (none free, or a paused limiter): its requests take the strict
// route, where they queue for a permit, rather than its circuit breaker's
// immediate 503.
func (s *share) resize(hold func(n int) []bulkhead.Permit, target int) {
	if target > len(s.held) {
		s.held = append(s.held, hold(target-len(s.held))...)
	}
	s.limit = min(target, len(s.held))
	s.strict = s.limit == 0
}

// heldLocked is how many permits are held for unit u's shares, those of
// replaced processes included.
func (m *Manager) heldLocked(u string) int {
	h := 0
	for _, n := range m.nodes {
		h += n.held(u)
	}
	for _, o := range m.orphans {
		if o.unit == u {
			h += len(o.held)
		}
	}
	return h
}

// settleLocked gives back the permits of n's shares that its Envoy can no
// longer use (node.bound), and forgets the shares that are over.
func (m *Manager) settleLocked(n *node) {
	if n.duplicate {
		// Reports of two processes cannot be told apart: every share comes
		// back a tail after the last layer that granted one.
		if n.lastShareSent.IsZero() || n.now.Sub(n.lastShareSent) >= m.Tail() {
			release(n.heldTotal())
			for _, s := range n.shares {
				s.held = nil
			}
			if n.conns <= 1 && n.lrsConns <= 1 {
				n.duplicate = false
				m.log.Info("one stream of each kind left: the node gets shares again", "node", n.id)
			}
		}
		return
	}
	for name, s := range n.shares {
		keep, ok := n.bound(name, s.cluster)
		if !ok {
			continue
		}
		keep = max(keep, s.limit) // what the next layer says is backed first
		if keep < len(s.held) {
			release(s.held[keep:])
			s.held = s.held[:keep]
		}
		if _, on := m.policies[bulkheadOf(name)]; !on && len(s.held) == 0 {
			delete(n.shares, name)
		}
	}
	n.trim()
}

// expireLocked releases the shares no Envoy can use any more: those of
// Envoys that are gone or stalled whose last response is older than the
// tail, and orphans past their end.
func (m *Manager) expireLocked(now time.Time) {
	tail := m.Tail()
	for id, n := range m.nodes {
		n.isStalled = n.conns > 0 && n.stalled(now, m.set.TTL)
		if n.live() {
			continue
		}
		held := n.heldTotal()
		switch {
		case len(held) == 0 && n.conns == 0 && n.lrsConns == 0:
			delete(m.nodes, id)
		case len(held) == 0:
		case now.Sub(n.lastSent) >= tail:
			m.log.Info("share of a silent Envoy given back", "node", id, "permits", len(held), "silent_for", now.Sub(n.lastSent).Round(time.Millisecond))
			release(held)
			n.shares, n.sent, n.resend = map[string]*share{}, nil, true
			if n.conns == 0 && n.lrsConns == 0 {
				delete(m.nodes, id)
			}
		}
	}
	kept := m.orphans[:0]
	for _, o := range m.orphans {
		if now.Before(o.until) {
			kept = append(kept, o)
			continue
		}
		m.log.Info("share of a replaced Envoy process given back", "node", o.node, "bulkhead", o.unit, "permits", len(o.held))
		release(o.held)
	}
	m.orphans = kept
}

func (m *Manager) wakeAllLocked() {
	for _, n := range m.nodes {
		n.wake()
	}
}

func release(ps []bulkhead.Permit) {
	for _, p := range ps {
		p.Release()
	}
}

// Stat is one bulkhead's shares, for the metrics: both classes together,
// and each class apart.
type Stat struct {
	Bulkhead string
	Mode     Mode
	Strict   bool // running strict now (mode auto near the limit)
	Envoys   int  // Envoys that hold part of it (a share of either class)
	Held     int  // permits held for shares
	Limit    int  // Σ max_requests the Envoys were last told
	InFlight int  // Σ requests the Envoys last reported in flight
	Switches [2]uint64
	// Normal is the shares of the normal share cluster (<cluster>),
	// Critical those of the critical one (<cluster>_critical); Held, Limit
	// and InFlight above are their sums.
	Normal, Critical ClassStat
}

// ClassStat is one class's shares of a bulkhead.
type ClassStat struct {
	Envoys   int // Envoys that hold a share of this class
	Held     int // permits held for this class's shares
	Limit    int // Σ max_requests of this class's share cluster
	InFlight int // Σ requests reported in flight on this class's share cluster
}

// Stats returns every bulkhead's shares, sorted by bulkhead.
func (m *Manager) Stats() []Stat {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Stat, 0, len(m.states))
	for _, name := range slices.Sorted(maps.Keys(m.states)) {
		st := m.states[name]
		p, on := m.policies[name]
		s := Stat{Bulkhead: name, Mode: p.Mode, Strict: !on || st.strict, Switches: st.switches}
		classOf := func(critical bool) *ClassStat {
			if critical {
				return &s.Critical
			}
			return &s.Normal
		}
		for _, n := range m.nodes {
			if n.held(name)+n.held(criticalUnit(name)) > 0 {
				s.Envoys++
			}
			for _, u := range [...]string{name, criticalUnit(name)} {
				c := classOf(u != name)
				if n.held(u) > 0 {
					c.Envoys++
				}
				if sh := n.shares[u]; sh != nil {
					c.Held += len(sh.held)
					c.Limit += sh.limit
					c.InFlight += n.inflight[sh.cluster]
				}
			}
		}
		for _, o := range m.orphans {
			if b, critical := unitOf(o.unit); b == name {
				classOf(critical).Held += len(o.held)
			}
		}
		s.Held = s.Normal.Held + s.Critical.Held
		s.Limit = s.Normal.Limit + s.Critical.Limit
		s.InFlight = s.Normal.InFlight + s.Critical.InFlight
		out = append(out, s)
	}
	return out
}

// EachShares calls each with every bulkhead's Stat, both classes together
// (metrics.SharesSource).
func (m *Manager) EachShares(each func(dependency string, strict bool, envoys, held, limit, inFlight int, toStrict, toShares uint64)) {
	for _, s := range m.Stats() {
		each(s.Bulkhead, s.Strict, s.Envoys, s.Held, s.Limit, s.InFlight, s.Switches[0], s.Switches[1])
	}
}

// EachSharesClass calls each with every bulkhead's Stat, once per class:
// normal, then critical (metrics.SharesSource).
func (m *Manager) EachSharesClass(each func(dependency string, priority bulkhead.Priority, envoys, held, limit, inFlight int)) {
	for _, s := range m.Stats() {
		for _, c := range [...]struct {
			p bulkhead.Priority
			s ClassStat
		}{{bulkhead.Normal, s.Normal}, {bulkhead.Critical, s.Critical}} {
			each(s.Bulkhead, c.p, c.s.Envoys, c.s.Held, c.s.Limit, c.s.InFlight)
		}
	}
}

// EachSharesRequests calls each with every bulkhead in mode shares or
// auto: the requests its Envoys' circuit breakers admitted under their
// shares and those they turned away, both classes, since the start
// (metrics.SharesSource).
func (m *Manager) EachSharesRequests(each func(dependency string, admitted, overflowed uint64)) {
	m.mu.Lock()
	out := make(map[string][2]uint64, len(m.states))
	for name := range m.states {
		if c := m.requests[name]; c != nil {
			out[name] = *c
		} else {
			out[name] = [2]uint64{}
		}
	}
	m.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(out)) {
		each(name, out[name][0], out[name][1])
	}
}

// InUseSampler is what sizing samples from a bulkhead (sizing.Sampler).
type InUseSampler interface {
	Keys() []string
	InUse(key string) (inUse, peak int, ok bool)
}

// Sampler wraps inner so that a bulkhead's permits held for shares count
// as the requests their Envoys last reported in flight under them: sizing
// then sees the calls, not the capacity handed out (which would read as
// demand and suggest a larger limit).
func (m *Manager) Sampler(inner InUseSampler) InUseSampler { return sharesSampler{inner, m} }

type sharesSampler struct {
	inner InUseSampler
	m     *Manager
}

func (s sharesSampler) Keys() []string { return s.inner.Keys() }

func (s sharesSampler) InUse(key string) (int, int, bool) {
	inUse, peak, ok := s.inner.InUse(key)
	held, inFlight := s.m.usage(key)
	return max(0, inUse-held+inFlight), max(0, peak-held+inFlight), ok
}

// usage returns the permits held for bulkhead name's shares and the
// requests its Envoys last reported in flight under them.
func (m *Manager) usage(name string) (held, inFlight int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.nodes {
		for _, u := range [...]string{name, criticalUnit(name)} {
			if s := n.shares[u]; s != nil {
				held += len(s.held)
				inFlight += min(n.inflight[s.cluster], len(s.held))
			}
		}
	}
	for _, o := range m.orphans {
		if bulkheadOf(o.unit) == name {
			held += len(o.held)
			inFlight += len(o.held) // unknown: counted in use
		}
	}
	return held, inFlight
}
