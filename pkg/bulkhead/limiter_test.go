package bulkhead

import (
	"errors"
	"fmt"
	"testing"
)

// step is one synchronous operation of a table test: acquire a class, or
// release the i-th permit granted so far.
type step struct {
	op   string // "acq" or "rel"
	prio Priority
	i    int
	want string // acq: "grant", "queue", "queue_full", "queue+shed:<waiter>"; rel: "granted:<waiter>" or ""
}

func acq(p Priority, want string) step { return step{op: "acq", prio: p, want: want} }
func rel(i int, want string) step      { return step{op: "rel", i: i, want: want} }

func TestAdmission(t *testing.T) {
	C, N, B := Critical, Normal, BestEffort
	tests := []struct {
		name   string
		s      Settings
		steps  []step
		inUse  int
		queued [3]int
	}{
		{"fail fast at the limit", Settings{MaxConcurrent: 2},
			[]step{acq(N, "grant"), acq(N, "grant"), acq(N, "queue_full"), acq(C, "queue_full")},
			2, [3]int{}},
		{"reserves: best_effort 7, normal 8, critical 10 of 10",
			Settings{MaxConcurrent: 10, ReserveCritical: 0.2, ReserveNormal: 0.1},
			[]step{acq(B, "grant"), acq(B, "grant"), acq(B, "grant"), acq(B, "grant"), acq(B, "grant"),
				acq(B, "grant"), acq(B, "grant"), acq(B, "queue_full"), acq(N, "grant"), acq(N, "queue_full"),
				acq(C, "grant"), acq(C, "grant"), acq(C, "queue_full")},
			10, [3]int{}},
		{"queue then queue_full", Settings{MaxConcurrent: 1, MaxQueue: 2},
			[]step{acq(N, "grant"), acq(N, "queue"), acq(N, "queue"), acq(N, "queue_full")},
			1, [3]int{0, 2, 0}},
		{"arrival sheds the youngest waiter of the lowest lower class", Settings{MaxConcurrent: 1, MaxQueue: 3},
			[]step{acq(C, "grant"),
				acq(B, "queue"), // w0
				acq(N, "queue"), // w1
				acq(B, "queue"), // w2, the youngest best_effort
				acq(C, "queue+shed:2"),
				acq(N, "queue+shed:0"),
				acq(N, "queue_full"), // only normal and critical queued now
			},
			1, [3]int{1, 2, 0}},
		{"same class never sheds", Settings{MaxConcurrent: 1, MaxQueue: 1},
			[]step{acq(N, "grant"), acq(B, "queue"), acq(B, "queue_full")},
			1, [3]int{0, 0, 1}},
		{"grants go highest class first, FIFO within a class", Settings{MaxConcurrent: 1, MaxQueue: 5},
			[]step{acq(N, "grant"), acq(B, "queue"), acq(N, "queue"), acq(C, "queue"), acq(N, "queue"),
				rel(0, "granted:2"), rel(1, "granted:1"), rel(2, "granted:3"), rel(3, "granted:0"), rel(4, "")},
			0, [3]int{}},
		{"free capacity under a class ceiling is not taken past an equal waiter",
			Settings{MaxConcurrent: 4, MaxQueue: 5, ReserveCritical: 0.5},
			// normal ceiling 2: two normals in, a third waits; critical still gets in;
			// a fourth normal queues behind the third.
			[]step{acq(N, "grant"), acq(N, "grant"), acq(N, "queue"), acq(C, "grant"), acq(N, "queue"),
				rel(2, ""),          // a critical permit frees, but normals are at their ceiling
				rel(0, "granted:0"), // a normal frees: the oldest normal waiter gets it
			},
			2, [3]int{0, 1, 0}},
		{"best_effort waits for its own ceiling even with free reserve",
			Settings{MaxConcurrent: 4, MaxQueue: 2, ReserveCritical: 0.25, ReserveNormal: 0.25},
			[]step{acq(B, "grant"), acq(B, "grant"), acq(B, "queue"), acq(N, "grant"), acq(C, "grant"),
				rel(3, ""), // critical frees: 3 in use, best_effort ceiling is 2
				rel(0, ""), // 2 in use: still at the best_effort ceiling
				rel(2, "granted:0")},
			2, [3]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := mustNew(t, tt.s)
			var granted []Permit
			var waiters []*waiter
			reported := map[*waiter]bool{}
			newlyDecided := func(shed bool) string {
				for j, w := range waiters {
					if isDecided(w) && !reported[w] && (w.err != nil) == shed {
						reported[w] = true
						if !shed {
							granted = append(granted, w.permit)
						}
						return fmt.Sprint(j)
					}
				}
				return ""
			}
			for i, st := range tt.steps {
				var got string
				if st.op == "rel" {
					if !granted[st.i].Release() {
						t.Fatalf("step %d: release of permit %d returned false", i, st.i)
					}
					if j := newlyDecided(false); j != "" {
						got = "granted:" + j
					}
				} else {
					w, p, err := enqueue(l, st.prio)
					switch {
					case errors.Is(err, ErrQueueFull):
						got = "queue_full"
					case err != nil:
						got = err.Error()
					case w == nil:
						got = "grant"
						granted = append(granted, p)
					default:
						got = "queue"
						if j := newlyDecided(true); j != "" {
							got += "+shed:" + j
						}
						waiters = append(waiters, w)
					}
				}
				if got != st.want {
					t.Fatalf("step %d %s(%v/%d): got %q, want %q", i, st.op, st.prio, st.i, got, st.want)
				}
			}
			s := l.Snapshot()
			if s.InUse != tt.inUse || s.Queued != tt.queued {
				t.Fatalf("in use %d queued %v, want %d %v", s.InUse, s.Queued, tt.inUse, tt.queued)
			}
			if got := s.Admitted[0] + s.Admitted[1] + s.Admitted[2] + s.Adopted - s.Released; got != uint64(s.InUse) {
				t.Fatalf("admitted-released = %d, in use %d", got, s.InUse)
			}
		})
	}
}

func TestTakePeak(t *testing.T) {
	l := mustNew(t, Settings{MaxConcurrent: 5})
	a, _ := l.TryAcquire(Normal)
	b, _ := l.TryAcquire(Normal)
	c, _ := l.TryAcquire(Normal)
	b.Release()
	c.Release()
	if p := l.TakePeak(); p != 3 {
		t.Fatalf("peak %d, want 3", p)
	}
	if p := l.TakePeak(); p != 1 {
		t.Fatalf("peak after the take %d, want 1 (in use)", p)
	}
	a.Release()
}
