package bulkhead

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// model is a deliberately naive reference of the admission model in
// DESIGN.md: one queue as a slice in arrival order, scanned literally.
type model struct {
	s        Settings
	inUse    int
	queue    []int // waiter ids in arrival order
	class    map[int]Priority
	held     map[int]bool // permit ids granted and not released
	released []int        // permit ids released (for double releases)
	admitted [numPriorities]uint64
	rejected [numReasons]uint64
	cancel   uint64
	rel, dup uint64

	// CoDel: the time, when each waiter queued (in any discipline: a
	// resize to CoDel reads it), okAt (see codel.go), and the waiters
	// dropped for waiting past the target while overloaded.
	now            time.Duration
	enq            map[int]time.Duration
	okAt, queuedAt time.Duration
	dropping       bool
	dropped        []int
}

// overloaded brings the CoDel state up to now: in after an interval with
// no sign the queue keeps up, out after an interval in which no one queued.
func (m *model) overloaded() bool {
	if m.s.Queue != CoDel {
		return false
	}
	if m.dropping && m.now-m.queuedAt >= m.s.CoDelInterval {
		m.dropping, m.okAt = false, m.now
	} else if !m.dropping && m.now-m.okAt >= m.s.CoDelInterval {
		m.dropping = true
	}
	return m.dropping
}

func (m *model) ceiling(p Priority) int { return m.s.Ceiling(p) }

// firstGrantable is the spec read literally: the first waiter, in class
// order then arrival order, whose class ceiling allows it.
func (m *model) firstGrantable() int {
	for _, c := range Priorities() {
		for i, id := range m.queue {
			if m.class[id] == c && m.inUse < m.ceiling(c) {
				return i
			}
		}
	}
	return -1
}

func (m *model) grant(id int, t *testing.T) {
	if m.inUse >= m.s.MaxConcurrent {
		t.Fatalf("model granted at in use %d >= limit %d", m.inUse, m.s.MaxConcurrent)
	}
	m.inUse++
	m.admitted[m.class[id]]++
	m.held[id] = true
}

// settle grants waiters until none is grantable; returns the granted ids.
func (m *model) settle(t *testing.T) []int {
	var out []int
	for i := m.firstGrantable(); i >= 0; i = m.firstGrantable() {
		if m.s.Queue == CoDel {
			if i = m.codelPick(m.class[m.queue[i]]); i < 0 {
				continue
			}
		}
		id := m.queue[i]
		m.queue = slices.Delete(m.queue, i, i+1)
		m.grant(id, t)
		out = append(out, id)
	}
	return out
}

// codelPick is the CoDel rule read literally: overloaded, drop the waiters
// of class c that waited past the target and take the newest one left;
// else take the oldest, noting a grant within the target.
func (m *model) codelPick(c Priority) int {
	var of []int // indices in m.queue of class c, oldest first
	for i, id := range m.queue {
		if m.class[id] == c {
			of = append(of, i)
		}
	}
	if !m.overloaded() {
		if m.now-m.enq[m.queue[of[0]]] <= m.s.CoDelTarget {
			m.okAt = m.now
		}
		return of[0]
	}
	var kept []int
	for _, id := range m.queue {
		if m.class[id] == c && m.now-m.enq[id] > m.s.CoDelTarget {
			m.rejected[ReasonTimeout]++
			m.dropped = append(m.dropped, id)
			continue
		}
		kept = append(kept, id)
	}
	m.queue = kept
	for i := len(m.queue) - 1; i >= 0; i-- {
		if m.class[m.queue[i]] == c {
			return i
		}
	}
	return -1
}

func (m *model) queuedIn(c Priority) int {
	n := 0
	for _, id := range m.queue {
		if m.class[id] == c {
			n++
		}
	}
	return n
}

// shedVictim: youngest waiter of the lowest class strictly below p.
func (m *model) shedVictim(p Priority, inclusive bool) int {
	for c := BestEffort; ; c-- {
		if c < p || (c == p && !inclusive) {
			return -1
		}
		for i := len(m.queue) - 1; i >= 0; i-- {
			if m.class[m.queue[i]] == c {
				return i
			}
		}
		if c == Critical {
			return -1
		}
	}
}

// runModel decodes ops from data and checks the limiter against the model
// after every step.
func runModel(t *testing.T, data []byte) {
	next := func() int {
		if len(data) == 0 {
			return -1
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	// arg reads an operand; an exhausted input reads as 0.
	arg := func() int { return max(next(), 0) }
	settings := func() Settings {
		s := Settings{MaxConcurrent: 1 + arg()%5, MaxQueue: arg() % 4}
		switch arg() % 3 {
		case 1:
			s.ReserveCritical = 0.2
		case 2:
			s.ReserveCritical, s.ReserveNormal = 0.25, 0.25
		}
		if arg()%2 == 1 {
			s.Queue, s.CoDelTarget, s.CoDelInterval = CoDel, 10*time.Millisecond, 50*time.Millisecond
		}
		if s.Validate() != nil {
			s.ReserveCritical, s.ReserveNormal = 0, 0
		}
		return s
	}
	if len(data) < 3 {
		return
	}
	m := &model{s: settings(), class: map[int]Priority{}, held: map[int]bool{}, enq: map[int]time.Duration{}}
	fc := clock.NewFake(epoch)
	l := mustNew(t, m.s, WithClock(fc))
	waiters := map[int]*waiter{}
	permits := map[int]Permit{}
	shed := map[int]bool{}
	dropped := func() {
		for _, id := range m.dropped {
			shed[id] = true // decided by the limiter, with ErrTimeout
		}
	}
	id := 0
	expectShed := func(i int) {
		vid := m.queue[i]
		m.queue = slices.Delete(m.queue, i, i+1)
		m.rejected[ReasonShed]++
		shed[vid] = true
	}
	for step := 0; ; step++ {
		op := next() // -1 ends the run
		if op < 0 {
			return
		}
		desc := ""
		before := l.Snapshot()
		var wantGranted []int
		m.dropped = nil
		switch op % 8 {
		case 0, 1, 2: // acquire
			p := Priority(arg() % numPriorities)
			if p > BestEffort {
				p = Normal
			}
			id++
			desc = fmt.Sprintf("acquire %v as %d", p, id)
			m.class[id] = p
			w, pm, err := enqueue(l, p)
			higherWaiting := false
			for c := Critical; c <= p; c++ {
				higherWaiting = higherWaiting || m.queuedIn(c) > 0
			}
			var bound time.Duration
			overloaded := m.overloaded()
			immediate := m.inUse < m.ceiling(p) && !higherWaiting
			m.enq[id] = m.now // read only if it queues
			if m.s.Queue == CoDel && immediate {
				m.okAt = m.now // spare capacity
			} else if m.s.Queue == CoDel {
				m.queuedAt = m.now
				if overloaded {
					bound = m.s.CoDelTarget
				}
			}
			switch {
			case immediate:
				m.grant(id, t)
				if err != nil || w != nil {
					t.Fatalf("step %d %s: want grant, got w=%v err=%v", step, desc, w != nil, err)
				}
				permits[id] = pm
			case len(m.queue) < m.s.MaxQueue || m.shedVictim(p, false) >= 0:
				if len(m.queue) >= m.s.MaxQueue {
					expectShed(m.shedVictim(p, false))
				}
				m.queue = append(m.queue, id)
				if err != nil || w == nil {
					t.Fatalf("step %d %s: want queue, got err=%v", step, desc, err)
				}
				if w.bound != bound {
					t.Fatalf("step %d %s: wait bound %v, want %v", step, desc, w.bound, bound)
				}
				waiters[id] = w
			default:
				m.rejected[ReasonQueueFull]++
				if !errors.Is(err, ErrQueueFull) {
					t.Fatalf("step %d %s: want queue_full, got w=%v err=%v", step, desc, w != nil, err)
				}
			}
		case 3: // cancel or time out a waiter
			if len(m.queue) == 0 {
				continue
			}
			i := arg() % len(m.queue)
			wid := m.queue[i]
			m.queue = slices.Delete(m.queue, i, i+1)
			cause := error(context.Canceled)
			if arg()%2 == 0 {
				cause = ErrTimeout
				m.rejected[ReasonTimeout]++
			} else {
				m.cancel++
			}
			desc = fmt.Sprintf("abandon %d (%v)", wid, cause)
			if _, err := l.abandon(waiters[wid], cause); !errors.Is(err, cause) {
				t.Fatalf("step %d %s: got %v", step, desc, err)
			}
			delete(waiters, wid)
			wantGranted = m.settle(t)
		case 4: // release a held permit
			ids := heldIDs(m)
			if len(ids) == 0 {
				continue
			}
			pid := ids[arg()%len(ids)]
			desc = fmt.Sprintf("release %d", pid)
			delete(m.held, pid)
			m.inUse--
			m.rel++
			m.released = append(m.released, pid)
			if !permits[pid].Release() {
				t.Fatalf("step %d %s: returned false", step, desc)
			}
			wantGranted = m.settle(t)
		case 5: // double release
			if len(m.released) == 0 {
				continue
			}
			pid := m.released[arg()%len(m.released)]
			desc = fmt.Sprintf("double release %d", pid)
			m.dup++
			if permits[pid].Release() {
				t.Fatalf("step %d %s: returned true", step, desc)
			}
		case 7: // time passes
			d := time.Duration(arg()%40) * time.Millisecond
			desc = fmt.Sprintf("advance %v", d)
			m.now += d
			fc.Advance(d)
		case 6: // resize
			old := m.s
			m.s = settings()
			if m.s.Queue == CoDel && old.Queue != CoDel {
				m.okAt, m.queuedAt, m.dropping = m.now, m.now, false
			}
			desc = fmt.Sprintf("resize %+v", m.s)
			if err := l.Resize(m.s); err != nil {
				t.Fatal(err)
			}
			wantGranted = m.settle(t)
			for len(m.queue) > m.s.MaxQueue {
				expectShed(m.shedVictim(Critical, true))
			}
		}
		// Which waiters did the limiter decide in this step?
		dropped()
		for _, gid := range wantGranted {
			w := waiters[gid]
			if !isDecided(w) || w.err != nil {
				t.Fatalf("step %d %s: waiter %d should be granted", step, desc, gid)
			}
			permits[gid] = w.permit
			delete(waiters, gid)
		}
		for sid := range shed {
			w := waiters[sid]
			want := ErrShed
			if slices.Contains(m.dropped, sid) {
				want = ErrTimeout
			}
			if !isDecided(w) || !errors.Is(w.err, want) {
				t.Fatalf("step %d %s: waiter %d should be decided with %v, got %v", step, desc, sid, want, w.err)
			}
			delete(waiters, sid)
			delete(shed, sid)
		}
		for wid, w := range waiters {
			if isDecided(w) {
				t.Fatalf("step %d %s: waiter %d decided unexpectedly (err %v)", step, desc, wid, w.err)
			}
		}
		s := l.Snapshot()
		var q [numPriorities]int
		for _, c := range Priorities() {
			q[c] = m.queuedIn(c)
		}
		if s.InUse != m.inUse || s.Queued != q || s.Admitted != m.admitted || s.Rejected != m.rejected ||
			s.Cancelled != m.cancel || s.Released != m.rel || s.DuplicateReleases != m.dup {
			t.Fatalf("step %d %s: limiter %+v\nmodel in use %d queued %v admitted %v rejected %v cancelled %d released %d dup %d",
				step, desc, s, m.inUse, q, m.admitted, m.rejected, m.cancel, m.rel, m.dup)
		}
		// The invariant: in use exceeds the limit only through permits granted
		// before a shrink, so a step that granted anything ends within it.
		granted := sum(s.Admitted) > sum(before.Admitted)
		if granted && s.InUse > s.Settings.MaxConcurrent {
			t.Fatalf("step %d %s: granted to %d in use over limit %d", step, desc, s.InUse, s.Settings.MaxConcurrent)
		}
	}
}

func heldIDs(m *model) []int {
	var ids []int
	for id := range m.held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func sum(a [numPriorities]uint64) uint64 { return a[0] + a[1] + a[2] }

func TestModelRandom(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	for seed := range uint64(n) {
		r := rand.New(rand.NewPCG(seed, 42))
		data := make([]byte, 50+r.IntN(300))
		for i := range data {
			data[i] = byte(r.UintN(256))
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, data) })
		if t.Failed() {
			return
		}
	}
}

func FuzzModel(f *testing.F) {
	f.Add([]byte{4, 3, 2, 0, 0, 0, 1, 0, 2, 4, 0, 6, 0, 0, 0})
	f.Add([]byte{0, 3, 0, 0, 2, 0, 1, 0, 0, 3, 0, 1, 4, 0, 5, 0, 6, 4, 0, 1, 4, 0})
	f.Add([]byte{1, 1, 2, 0, 2, 1, 1, 0, 0, 6, 2, 3, 0, 3, 0, 0})
	// CoDel: queue, let the interval pass, queue more, release.
	f.Add([]byte{0, 3, 0, 1, 0, 1, 0, 1, 0, 1, 7, 30, 7, 30, 0, 1, 0, 2, 4, 0, 7, 5, 4, 0, 3, 0, 0})
	// FIFO, limit 1: one in use, one queued at 20ms; resize to CoDel; the
	// release at 25ms serves the waiter within the target (it waited 5ms,
	// not since time 0), so an arrival at 70ms finds no overload.
	f.Add([]byte{0, 1, 0, 0, 0, 0, 7, 20, 0, 0, 6, 0, 1, 0, 1, 7, 5, 4, 0, 7, 39, 7, 6, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		runModel(t, data)
	})
}
