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
	a.Merge(sb.Calls, sb.Failed, sb)
	wantState(t, a, Closed) // 3 calls: below min_requests 4
	record(b, false)        // b: 2 calls, 1 failed; with a's: 4 calls, 3 failed
	wantState(t, b, Closed)
	b.Merge(sa.Calls, sa.Failed, sa)
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
	a.Merge(0, 0, opened)
	wantState(t, a, Open)
	if ok, retry := a.Allow(); ok || retry != 400*time.Millisecond {
		t.Fatalf("a after adopting: Allow() = %v, %v; want refused for the 400ms left of b's open_for", ok, retry)
	}
	// b's share again (an echo) changes nothing at a.
	a.Merge(0, 0, opened)
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
	b.Merge(0, 0, Share{Entered: Closed, At: epoch.Add(-time.Second)})
	wantState(t, b, Open)
	b.Merge(0, 0, Share{Entered: HalfOpen, At: epoch.Add(time.Millisecond)})
	wantState(t, b, Open)
	fc.Advance(600 * time.Millisecond) // half-open
	wantState(t, b, HalfOpen)
	b.Merge(0, 0, Share{Entered: Closed, At: epoch.Add(-time.Millisecond)})
	wantState(t, b, HalfOpen) // older than b's opening
	// A peer's probes closed it after b's opening, before b turned
	// half-open (it does when next asked): closed.
	b.Merge(0, 0, Share{Entered: Closed, At: epoch.Add(550 * time.Millisecond)})
	wantState(t, b, Closed)
	if ok, _ := b.Allow(); !ok {
		t.Fatal("closed breaker refused")
	}
}

// An operator's mode is this replica's own: a forced breaker shares
// nothing and adopts nothing, and back in Auto it takes the mesh's state.
func TestMergeUnderMode(t *testing.T) {
	fc := clock.NewFake(epoch)
	b := New(settings(), fc)
	b.SetMode(ForceClosed)
	record(b, true, true, true, true)
	if sh := b.Local(); sh != (Share{}) {
		t.Errorf("forced breaker shares %+v", sh)
	}
	peerOpen := Share{Entered: Open, At: epoch}
	b.Merge(10, 10, peerOpen)
	if ok, _ := b.Allow(); !ok {
		t.Fatal("force-closed breaker refused")
	}
	b.SetMode(Auto)
	if sh := b.Local(); !sh.At.IsZero() {
		t.Errorf("the return to Auto is shared: %+v", sh)
	}
	b.Merge(0, 0, peerOpen)
	wantState(t, b, Open)
}
