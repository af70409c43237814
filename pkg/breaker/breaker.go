package breaker

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// State is a breaker's state; its value is the bulkhead_circuit_state
// gauge's.
type State uint8

// The states.
const (
	Closed State = iota
	Open
	HalfOpen

	numStates = 3
)

var stateNames = [numStates]string{"closed", "open", "half_open"}

// States lists every state.
func States() []State { return []State{Closed, Open, HalfOpen} }

// String returns the state's metric label and API name.
func (s State) String() string {
	if int(s) < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Mode is an operator's override of a breaker.
type Mode uint8

// The modes.
const (
	Auto        Mode = iota // the breaker follows its outcomes
	ForceOpen               // refuse every request
	ForceClosed             // allow every request
)

var modeNames = [...]string{"auto", "force_open", "force_closed"}

// String returns the mode's API name.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ErrUnknownMode is returned by ParseMode.
var ErrUnknownMode = errors.New("unknown breaker mode")

// ParseMode maps "auto", "force_open" or "force_closed" to its mode.
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if s == n {
			return Mode(i), nil
		}
	}
	return Auto, fmt.Errorf("%w %q (want auto, force_open or force_closed)", ErrUnknownMode, s)
}

// Settings are one breaker's tunables (the bulkhead's circuit_breaker).
type Settings struct {
	FailureRatio     float64       // in (0, 1]
	MinRequests      int           // >= 1
	Window           time.Duration // > 0
	OpenFor          time.Duration // > 0
	HalfOpenProbes   int           // >= 1
	SlowCallDuration time.Duration // 0 = off
}

// Defaults of the settings a configuration leaves out.
const (
	DefaultFailureRatio   = 0.5
	DefaultMinRequests    = 20
	DefaultWindow         = 10 * time.Second
	DefaultOpenFor        = 5 * time.Second
	DefaultHalfOpenProbes = 5
)

// Validate reports every problem with s at once, each naming its field.
func (s Settings) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if math.IsNaN(s.FailureRatio) || s.FailureRatio <= 0 || s.FailureRatio > 1 {
		add("failure_ratio: must be in (0, 1], got %v", s.FailureRatio)
	}
	if s.MinRequests < 1 {
		add("min_requests: must be at least 1, got %d", s.MinRequests)
	}
	if s.Window < numBuckets*time.Millisecond {
		add("window: must be at least %s, got %s", numBuckets*time.Millisecond, s.Window)
	}
	if s.OpenFor <= 0 {
		add("open_for: must be positive, got %s", s.OpenFor)
	}
	if s.HalfOpenProbes < 1 {
		add("half_open_probes: must be at least 1, got %d", s.HalfOpenProbes)
	}
	if s.SlowCallDuration < 0 {
		add("slow_call_duration: must not be negative, got %s", s.SlowCallDuration)
	}
	return errors.Join(errs...)
}

// numBuckets is how many time buckets a window holds.
const numBuckets = 10

type bucket struct {
	start         time.Time
	calls, failed uint64
}

// Breaker is one bulkhead's circuit breaker. Create it with New.
type Breaker struct {
	clock clock.Clock

	mu          sync.Mutex
	s           Settings
	mode        Mode
	state       State
	since       time.Time // when state began (or the probe round, HalfOpen)
	buckets     [numBuckets]bucket
	probes      int // HalfOpen: allowed this round
	probeOK     int // HalfOpen: successful probes
	refused     uint64
	transitions [numStates]uint64 // by the state entered
	// changed: the state changed at least once (since is its time);
	// openedAt is when it last entered Open; modeAt when an operator last
	// set the mode (zero: never).
	changed          bool
	openedAt, modeAt time.Time
	// The other replicas' windows, summed (Merge); zero with one replica.
	peerCalls, peerFailed uint64
	// passAll: Allow lets every request through (closed in Auto, or
	// ForceClosed); written under mu, read without it.
	passAll atomic.Bool
}

// New returns a closed breaker with settings s (validated by the caller).
func New(s Settings, c clock.Clock) *Breaker {
	b := &Breaker{clock: c, s: s, since: c.Now()}
	b.passAll.Store(true)
	return b
}

// Allow reports whether a request may go on. When it may not, retryAfter
// is how long until the breaker lets requests through again (at least 1 ms).
// A breaker that lets everything through (closed, or forced closed) answers
// without its lock: Allow is on every Check's path.
func (b *Breaker) Allow() (ok bool, retryAfter time.Duration) {
	if b.passAll.Load() {
		return true, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	switch b.mode {
	case ForceOpen:
		b.refused++
		return false, b.s.OpenFor
	case ForceClosed:
		return true, 0
	}
	if b.state == Open && now.Sub(b.since) >= b.s.OpenFor {
		b.enter(HalfOpen, now)
	}
	switch b.state {
	case Open:
		b.refused++
		return false, max(time.Millisecond, b.s.OpenFor-now.Sub(b.since))
	case HalfOpen:
		if now.Sub(b.since) >= b.s.OpenFor { // the round's probes never reported
			b.since, b.probes, b.probeOK = now, 0, 0
		}
		if b.probes >= b.s.HalfOpenProbes {
			b.refused++
			return false, max(time.Millisecond, b.s.OpenFor-now.Sub(b.since))
		}
		b.probes++
	}
	return true, 0
}

// Record feeds the outcome of one request that ran for d.
func (b *Breaker) Record(failed bool, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mode != Auto {
		return
	}
	now := b.clock.Now()
	failed = failed || b.s.SlowCallDuration > 0 && d >= b.s.SlowCallDuration
	switch b.state {
	case Open:
		return
	case HalfOpen:
		if failed {
			b.enter(Open, now)
			return
		}
		if b.probeOK++; b.probeOK >= b.s.HalfOpenProbes {
			b.enter(Closed, now)
		}
		return
	}
	bk := b.bucket(now)
	bk.calls++
	if failed {
		bk.failed++
	}
	b.checkOpen(now)
}

// SetMode installs an operator override; Auto returns to the model from
// Closed with an empty window.
func (b *Breaker) SetMode(m Mode) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	b.setMode(m, now, now)
}

// setMode installs mode m, set by an operator at at (here, or at a peer).
// b.mu must be held.
func (b *Breaker) setMode(m Mode, at, now time.Time) {
	b.modeAt = at
	if m == b.mode {
		return
	}
	b.mode = m
	// A mode begins its state afresh, even the state b was in: back in
	// Auto from ForceClosed, the window holds none of what came before.
	switch m {
	case ForceOpen:
		b.enterAt(Open, now)
	default:
		b.enterAt(Closed, now)
	}
	// An operator's change of state is not a change of the model's: not
	// shared as one (Local), and the peers' last change, if any, is
	// adopted again (Merge).
	b.changed = false
}

// Resize installs new settings, keeping the state and the window.
func (b *Breaker) Resize(s Settings) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.s = s
}

// Snapshot is a copy of a breaker's state and counters.
type Snapshot struct {
	State State
	Mode  Mode
	// Since is when the state began.
	Since time.Time
	// Calls and Failed are the closed state's window, this replica's own;
	// PeerCalls and PeerFailed the other replicas' (Merge), which count
	// toward opening too.
	Calls, Failed         uint64
	PeerCalls, PeerFailed uint64
	// Refused counts requests the breaker refused.
	Refused uint64
	// Transitions counts state changes, indexed by the state entered.
	Transitions [numStates]uint64
	Settings    Settings
}

// Snapshot returns the breaker's state; an open breaker whose time is up
// reads HalfOpen.
func (b *Breaker) Snapshot() Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	if b.mode == Auto && b.state == Open && now.Sub(b.since) >= b.s.OpenFor {
		b.enter(HalfOpen, now)
	}
	calls, fails := b.totals(now)
	return Snapshot{State: b.state, Mode: b.mode, Since: b.since, Calls: calls, Failed: fails,
		PeerCalls: b.peerCalls, PeerFailed: b.peerFailed, Refused: b.refused, Transitions: b.transitions, Settings: b.s}
}

// enter changes the state at now. b.mu must be held.
func (b *Breaker) enter(s State, now time.Time) {
	if s == b.state {
		return
	}
	b.enterAt(s, now)
}

// enterAt begins state s at t (now, or a peer's time for a change adopted
// from it, which may re-enter Open from a newer time): the probes, the
// window and the peers' window start again. b.mu must be held.
func (b *Breaker) enterAt(s State, t time.Time) {
	if s != b.state {
		b.transitions[s]++
	}
	b.state, b.since, b.changed = s, t, true
	if s == Open {
		b.openedAt = t
	}
	b.probes, b.probeOK = 0, 0
	b.buckets = [numBuckets]bucket{}
	b.peerCalls, b.peerFailed = 0, 0
	b.passAll.Store(b.mode == ForceClosed || b.mode == Auto && s == Closed)
}

// bucket returns the bucket of now, reset if it held an older span.
func (b *Breaker) bucket(now time.Time) *bucket {
	width := b.s.Window / numBuckets
	start := now.Truncate(width)
	bk := &b.buckets[(start.UnixNano()/int64(width))%numBuckets]
	if !bk.start.Equal(start) {
		*bk = bucket{start: start}
	}
	return bk
}

// totals sums the buckets within the window ending at now.
func (b *Breaker) totals(now time.Time) (calls, failed uint64) {
	for _, bk := range b.buckets {
		if !bk.start.IsZero() && now.Sub(bk.start) < b.s.Window {
			calls += bk.calls
			failed += bk.failed
		}
	}
	return calls, failed
}
