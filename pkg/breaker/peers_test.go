package breaker

import (
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// Two replicas' windows add up: neither alone reaches min_requests, both
// open once they know of each other's failures.
func TestMergeOpensOnThePeersWindow(t *testing.T) {
	fc := clock.NewFake(epoch)
	a, b := New(settings(), fc), New(settings(), fc)
	record(a, true, true)
	record(b, true)
	wantState(t, a, Closed)
	sa, sb := a.Local(), b.Local()
	if sa.Calls != 2 || sa.Failed != 2 || !sa.At.IsZero() {
		t.Fatalf("a's share %+v, want 2 calls, 2 failed, no change yet", sa)
	}
	a.Merge([]Share{sb})
	wantState(t, a, Closed) // 3 calls: below min_requests 4
	record(b, false)        // b: 2 calls, 1 failed; with a's: 4 calls, 3 failed
	wantState(t, b, Closed)
	b.Merge([]Share{sa})
	wantState(t, b, Open)
	if s := b.Snapshot(); s.PeerCalls != 0 || s.Calls != 0 {
		t.Errorf("opened breaker keeps a window: %+v", s)
	}
	// a adopts b's opening, with b's time: half-open open_for after it.
	opened := b.Local()
	if opened.Entered != Open || !opened.At.Equal(epoch) {
		t.Fatalf("b's share after opening %+v", opened)
	}
	fc.Advance(100 * time.Millisecond)
	a.Merge([]Share{{Entered: Open, At: opened.At}})
	wantState(t, a, Open)
	if ok, retry := a.Allow(); ok || retry != 400*time.Millisecond {
		t.Fatalf("a after adopting: Allow() = %v, %v; want refused for the 400ms left of b's open_for", ok, retry)
	}
	// b's share again (an echo) changes nothing at a.
	a.Merge([]Share{{Entered: Open, At: opened.At}})
	if s := a.Snapshot(); s.Transitions[Open] != 1 {
		t.Errorf("a opened %d times, want once", s.Transitions[Open])
	}
}

// A peer's closing (its probes succeeded) after b's opening closes b, open
// or half-open, with an empty window; an older one, or a half-open, does
// not.
func TestMergeAdoptsNewerCloseOnly(t *testing.T) {
	fc := clock.NewFake(epoch)
	b := New(settings(), fc)
	record(b, true, true, true, true)
	wantState(t, b, Open)
	b.Merge([]Share{{Entered: Closed, At: epoch.Add(-time.Second)}})
	wantState(t, b, Open)
	b.Merge([]Share{{Entered: HalfOpen, At: epoch.Add(time.Millisecond)}})
	wantState(t, b, Open)
	fc.Advance(600 * time.Millisecond) // half-open
	wantState(t, b, HalfOpen)
	b.Merge([]Share{{Entered: Closed, At: epoch.Add(-time.Millisecond)}})
	wantState(t, b, HalfOpen) // older than b's opening
	// A peer's probes closed it after b's opening, before b turned
	// half-open (it does when next asked): closed.
	b.Merge([]Share{{Entered: Closed, At: epoch.Add(550 * time.Millisecond)}})
	wantState(t, b, Closed)
	if ok, _ := b.Allow(); !ok {
		t.Fatal("closed breaker refused")
	}
}

// An operator's mode holds at every replica: the newest wins, a forced
// breaker adopts no state change and shares no window, and back in Auto it
// takes the mesh's state.
func TestMergeMode(t *testing.T) {
	fc := clock.NewFake(epoch)
	a, b := New(settings(), fc), New(settings(), fc)
	a.SetMode(ForceOpen)
	record(a, true, true, true, true)
	sa := a.Local()
	if sa.Mode != ForceOpen || !sa.ModeAt.Equal(epoch) || sa.Calls != 0 || !sa.At.IsZero() {
		t.Fatalf("forced breaker shares %+v, want its mode and nothing else", sa)
	}
	b.Merge([]Share{sa})
	if s := b.Snapshot(); s.Mode != ForceOpen || s.State != Open {
		t.Fatalf("b %v %v after a's force_open, want force_open, open", s.Mode, s.State)
	}
	if ok, _ := b.Allow(); ok {
		t.Fatal("b lets a request through under a's force_open")
	}
	// The echo of the same mode from b changes nothing at a; a peer's
	// opening does not move a forced breaker.
	a.Merge([]Share{b.Local(), {Entered: Closed, At: epoch.Add(time.Second)}})
	if s := a.Snapshot(); s.Mode != ForceOpen || s.State != Open {
		t.Fatalf("a %v %v, want still force_open", s.Mode, s.State)
	}
	// Back to auto at b, later: a follows, and takes a peer's opening.
	fc.Advance(time.Second)
	b.SetMode(Auto)
	if sh := b.Local(); !sh.At.IsZero() || sh.Mode != Auto {
		t.Errorf("the return to auto is shared as a state change: %+v", sh)
	}
	a.Merge([]Share{b.Local()})
	if s := a.Snapshot(); s.Mode != Auto || s.State != Closed {
		t.Fatalf("a %v %v after b's auto, want auto, closed", s.Mode, s.State)
	}
	a.Merge([]Share{b.Local(), {Entered: Open, At: epoch.Add(time.Second)}})
	wantState(t, a, Open)
	// An older mode is not adopted.
	a.Merge([]Share{{Mode: ForceClosed, ModeAt: epoch}})
	if s := a.Snapshot(); s.Mode != Auto {
		t.Errorf("a took an older mode: %v", s.Mode)
	}
}
