package breaker

import (
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func settings() Settings {
	return Settings{FailureRatio: 0.5, MinRequests: 4, Window: time.Second, OpenFor: 500 * time.Millisecond, HalfOpenProbes: 2}
}

func record(b *Breaker, failed ...bool) {
	for _, f := range failed {
		b.Record(f, time.Millisecond)
	}
}

func wantState(t *testing.T, b *Breaker, want State) {
	t.Helper()
	if got := b.Snapshot().State; got != want {
		t.Fatalf("state %v, want %v", got, want)
	}
}

func TestOpensAtRatioWithMinRequests(t *testing.T) {
	fc := clock.NewFake(epoch)
	b := New(settings(), fc)
	record(b, true, true, true) // 3 failures: below min_requests
	wantState(t, b, Closed)
	record(b, false) // 3 of 4 failed
	wantState(t, b, Open)
	ok, retry := b.Allow()
	if ok || retry != 500*time.Millisecond {
		t.Fatalf("open: Allow() = %v, %v; want refused, retry after open_for", ok, retry)
	}
	fc.Advance(200 * time.Millisecond)
	if _, retry = b.Allow(); retry != 300*time.Millisecond {
		t.Fatalf("retry-after %v, want the 300ms left", retry)
	}
	if s := b.Snapshot(); s.Refused != 2 || s.Transitions[Open] != 1 {
		t.Fatalf("refused %d, opened %d", s.Refused, s.Transitions[Open])
	}
}

func TestWindowForgets(t *testing.T) {
	fc := clock.NewFake(epoch)
	b := New(settings(), fc)
	record(b, true, true, false)
	fc.Advance(time.Second) // those fall out of the window
	record(b, true, false, false, false)
	wantState(t, b, Closed)
	if s := b.Snapshot(); s.Calls != 4 || s.Failed != 1 {
		t.Fatalf("window holds %d calls, %d failed; want 4, 1", s.Calls, s.Failed)
	}
	record(b, true) // 2 of 5
	record(b, true) // 3 of 6: opens
	wantState(t, b, Open)
}

func TestHalfOpenProbes(t *testing.T) {
	fc := clock.NewFake(epoch)
	b := New(settings(), fc)
	record(b, true, true, true, true)
	fc.Advance(500 * time.Millisecond)
	for i := range 2 {
		if ok, _ := b.Allow(); !ok {
			t.Fatalf("probe %d refused", i)
		}
	}
	if ok, _ := b.Allow(); ok {
		t.Fatal("a third probe was allowed")
	}
	wantState(t, b, HalfOpen)
	record(b, false)
	wantState(t, b, HalfOpen)
	record(b, false)
	wantState(t, b, Closed)
	if ok, _ := b.Allow(); !ok {
		t.Fatal("closed breaker refused")
	}

	record(b, true, true, true, true) // open again
	fc.Advance(500 * time.Millisecond)
	b.Allow()
	record(b, true) // a failed probe reopens
	wantState(t, b, Open)
	if s := b.Snapshot(); s.Transitions != [numStates]uint64{Closed: 1, Open: 3, HalfOpen: 2} {
		t.Fatalf("transitions %v", s.Transitions)
	}
}

// TestLostProbes: probes that never report (refused further on) are given
// up after open_for, and new probes may go.
func TestLostProbes(t *testing.T) {
	fc := clock.NewFake(epoch)
	b := New(settings(), fc)
	record(b, true, true, true, true)
	fc.Advance(500 * time.Millisecond)
	b.Allow()
	b.Allow()
	if ok, _ := b.Allow(); ok {
		t.Fatal("probes exhausted, yet allowed")
	}
	fc.Advance(500 * time.Millisecond)
	if ok, _ := b.Allow(); !ok {
		t.Fatal("a new probe round should start after open_for")
	}
}

func TestSlowCalls(t *testing.T) {
	fc := clock.NewFake(epoch)
	s := settings()
	s.SlowCallDuration = 2 * time.Second
	b := New(s, fc)
	for range 4 {
		b.Record(false, 2*time.Second)
	}
	wantState(t, b, Open)
	b2 := New(s, fc)
	for range 4 {
		b2.Record(false, 1999*time.Millisecond)
	}
	wantState(t, b2, Closed)
}

func TestIgnoredWhileOpen(t *testing.T) {
	fc := clock.NewFake(epoch)
	b := New(settings(), fc)
	record(b, true, true, true, true)
	record(b, false, false, false) // requests allowed before it opened
	fc.Advance(500 * time.Millisecond)
	wantState(t, b, HalfOpen)
}

func TestModes(t *testing.T) {
	fc := clock.NewFake(epoch)
	b := New(settings(), fc)
	b.SetMode(ForceOpen)
	if ok, _ := b.Allow(); ok {
		t.Fatal("force_open allowed")
	}
	fc.Advance(time.Hour)
	wantState(t, b, Open)
	b.SetMode(ForceClosed)
	record(b, true, true, true, true, true)
	if ok, _ := b.Allow(); !ok {
		t.Fatal("force_closed refused")
	}
	wantState(t, b, Closed)
	b.SetMode(Auto)
	if s := b.Snapshot(); s.Calls != 0 || s.Mode != Auto {
		t.Fatalf("auto after force_closed: %+v", s)
	}
	for _, m := range []Mode{Auto, ForceOpen, ForceClosed} {
		if got, err := ParseMode(m.String()); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseMode("open"); err == nil {
		t.Error(`ParseMode("open") succeeded`)
	}
}

func TestValidate(t *testing.T) {
	if err := settings().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Settings{FailureRatio: 1.5, Window: time.Millisecond, SlowCallDuration: -1}
	err := bad.Validate()
	for _, field := range []string{"failure_ratio", "min_requests", "window", "open_for", "half_open_probes", "slow_call_duration"} {
		if err == nil || !strings.Contains(err.Error(), field+":") {
			t.Errorf("Validate(%+v) = %v, want a problem with %s", bad, err, field)
		}
	}
}

func TestSetApply(t *testing.T) {
	fc := clock.NewFake(epoch)
	s := NewSet(fc)
	s.Apply(map[string]Settings{"a": settings(), "b": settings()})
	for range 4 {
		s.Record("a", true, 0)
	}
	s.Record("none", true, 0)
	if ok, _ := s.Allow("none"); !ok {
		t.Fatal("a bulkhead without a breaker was refused")
	}
	s.Apply(map[string]Settings{"a": settings()})
	if ok, _ := s.Allow("a"); ok {
		t.Fatal("Apply lost a's open state")
	}
	if n := s.States(); len(n) != 1 || n[0].Name != "a" || n[0].State != Open {
		t.Fatalf("snapshots %+v", n)
	}
}

// TestSetEnded: the access log's outcomes feed the breaker; an aborted
// request (the client went away) says nothing of the upstream.
func TestSetEnded(t *testing.T) {
	s := NewSet(clock.NewFake(epoch))
	s.Apply(map[string]Settings{"a": settings()})
	for range 10 {
		s.Ended("a", bulkhead.Aborted, 0)
	}
	s.Ended("a", bulkhead.Success, 0)
	if st := s.Get("a").Snapshot(); st.Calls != 1 || st.Failed != 0 {
		t.Fatalf("window %d calls, %d failed; want 1, 0", st.Calls, st.Failed)
	}
	for range 3 {
		s.Ended("a", bulkhead.Failure, 0)
	}
	if st := s.Get("a").Snapshot(); st.State != Open {
		t.Fatalf("state %v after 3 failures of 4, want open", st.State)
	}
}

// Back in auto from force_closed, the window is empty: the failures seen
// before the operator stepped in do not open it on the next outcome.
func TestAutoAfterForceClosedStartsEmpty(t *testing.T) {
	fc := clock.NewFake(epoch)
	b := New(settings(), fc)
	record(b, true, true, true)
	b.SetMode(ForceClosed)
	fc.Advance(time.Second / 2)
	b.SetMode(Auto)
	if s := b.Snapshot(); s.State != Closed || s.Calls != 0 || s.Failed != 0 {
		t.Fatalf("back in auto: %v with %d calls, %d failed in the window; want closed and empty", s.State, s.Calls, s.Failed)
	}
	record(b, false)
	wantState(t, b, Closed)
	if ok, _ := b.Allow(); !ok {
		t.Fatal("closed breaker refused")
	}
}
