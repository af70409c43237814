package sizing

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// drive feeds o rate requests a second holding hold each, for secs
// seconds, with inUse(sec) permits in use sampled each second.
func drive(o *Observer, fc *clock.Fake, name string, secs, rate int, hold time.Duration, inUse func(sec int) int) {
	for sec := range secs {
		for range rate {
			o.Ended(name, bulkhead.Success, hold)
		}
		o.Sample(name, inUse(sec), inUse(sec))
		fc.Advance(time.Second)
	}
}

func params() Params { return Params{}.Defaults() }

func TestLittlesLaw(t *testing.T) {
	fc := clock.NewFake(epoch)
	o := New(fc)
	// 100/s holding 50 ms: Little says 5 permits; the samples say 4 or 5.
	drive(o, fc, "catalog", 60, 100, 50*time.Millisecond, func(sec int) int { return 4 + sec%2 })
	s, err := o.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 50, MaxQueue: 3, MaxWait: 100 * time.Millisecond}, params())
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 6000 || s.Throughput != 100 || s.MeanHold != 50*time.Millisecond || s.Little != 5 || s.Peak != 5 || s.P99 != 5 {
		t.Fatalf("evidence %+v", s)
	}
	// ceil(max(5 × 1.25, 5)) = 7; the queue 7 permits serve in 100 ms at 50 ms each: 14.
	if s.MaxConcurrent != 7 || s.MaxQueue != 14 {
		t.Fatalf("recommended %d/%d, want 7/14", s.MaxConcurrent, s.MaxQueue)
	}
}

// TestP99Wins: bursts held more than 1% of the time, above what Little's
// law and the headroom give, raise the limit to the p99 in use.
func TestP99Wins(t *testing.T) {
	fc := clock.NewFake(epoch)
	o := New(fc)
	drive(o, fc, "catalog", 100, 10, 100*time.Millisecond, func(sec int) int {
		if sec%10 == 0 {
			return 8 // a burst every 10 s
		}
		return 1
	})
	p := params()
	p.Headroom = 0.5
	s, err := o.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 2}, p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Little != 1 || s.P99 != 8 || s.MaxConcurrent != 8 || s.MaxQueue != 0 {
		t.Fatalf("little %v, p99 %d, recommended %d/%d; want 1, 8, 8 (above 1 × 1.5), 0 (max_wait 0 keeps it)",
			s.Little, s.P99, s.MaxConcurrent, s.MaxQueue)
	}
}

func TestTooLittleTraffic(t *testing.T) {
	fc := clock.NewFake(epoch)
	o := New(fc)
	drive(o, fc, "catalog", 9, 10, time.Millisecond, func(int) int { return 1 })
	if _, err := o.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 1}, params()); !errors.Is(err, ErrTooLittleTraffic) {
		t.Fatalf("90 requests: %v, want ErrTooLittleTraffic", err)
	}
	if _, err := o.Suggest("nothing", bulkhead.Settings{MaxConcurrent: 1}, params()); !errors.Is(err, ErrTooLittleTraffic) {
		t.Fatalf("no traffic: %v", err)
	}
}

// TestWindow: what is older than the window does not count.
func TestWindow(t *testing.T) {
	fc := clock.NewFake(epoch)
	o := New(fc)
	drive(o, fc, "catalog", 10, 100, time.Second, func(int) int { return 100 })
	fc.Advance(time.Minute)
	drive(o, fc, "catalog", 10, 100, 10*time.Millisecond, func(int) int { return 1 })
	p := params()
	p.Window = 30 * time.Second
	s, err := o.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 1}, p)
	if err != nil || s.Requests != 1000 || s.Peak != 1 {
		t.Fatalf("%+v %v; want only the last 1000 requests", s, err)
	}
	o.Retain(map[string]bool{})
	if _, err := o.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 1}, p); !errors.Is(err, ErrTooLittleTraffic) {
		t.Fatalf("after Retain: %v", err)
	}
}

func TestParams(t *testing.T) {
	if err := params().Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Params{Window: time.Hour, Headroom: -1}).Validate(); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("Validate = %v", err)
	}
}

func TestRunSamplesPeaks(t *testing.T) {
	fc := clock.NewFake(epoch)
	o := New(fc)
	reg := bulkhead.NewRegistry()
	if _, err := reg.Apply(map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 5}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx, LimiterSampler(reg), 250*time.Millisecond) }()
	a, _ := reg.Get("catalog").TryAcquire(bulkhead.Normal)
	b, _ := reg.Get("catalog").TryAcquire(bulkhead.Normal)
	b.Release()
	testkit.Eventually(t, "the sampler's timer", func() bool { return fc.Timers() == 1 })
	fc.Advance(250 * time.Millisecond)
	testkit.Eventually(t, "the next timer", func() bool { return fc.Timers() == 1 })
	for range 200 {
		o.Ended("catalog", bulkhead.Success, time.Millisecond)
	}
	s, err := o.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 5}, params())
	if err != nil || s.Peak != 2 {
		t.Fatalf("%+v %v; want the sampled peak 2", s, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a.Release()
}

// TestPartialEdges: the first and last seconds of a load are partial and
// do not lower the throughput.
func TestPartialEdges(t *testing.T) {
	fc := clock.NewFake(epoch)
	o := New(fc)
	perSec := []int{30, 100, 100, 100, 100, 50}
	for _, n := range perSec {
		for range n {
			o.Ended("catalog", bulkhead.Success, 100*time.Millisecond)
		}
		fc.Advance(time.Second)
	}
	s, err := o.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 1}, params())
	if err != nil || s.Throughput != 100 || s.Little != 10 {
		t.Fatalf("%+v %v; want throughput 100, Little 10", s, err)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakePeers are other replicas that saw what peer returns, or err.
type fakePeers struct {
	peer func(sec int64) Counts
	err  error
}

func (f fakePeers) Ended(_ string, from, to int64) (map[int64]Counts, error) {
	if f.err != nil {
		return nil, f.err
	}
	out := map[int64]Counts{}
	for sec := from; sec <= to; sec++ {
		if c := f.peer(sec); c.Requests > 0 {
			out[sec] = c
		}
	}
	return out, nil
}

// TestPeers: another replica heard the other half of the traffic (its own
// access-log streams): the suggestion counts both halves, second by
// second; with the peers unreadable it refuses rather than size from half.
func TestPeers(t *testing.T) {
	fc := clock.NewFake(epoch)
	o := New(fc)
	start := fc.Now().Unix()
	o.SetPeers(fakePeers{peer: func(sec int64) Counts {
		if sec < start || sec >= start+60 {
			return Counts{}
		}
		return Counts{Requests: 50, Hold: 50 * 50 * time.Millisecond}
	}})
	// 50/s here and 50/s there, holding 50 ms: Little says 5 permits.
	drive(o, fc, "catalog", 60, 50, 50*time.Millisecond, func(int) int { return 5 })
	s, err := o.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 50}, params())
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 6000 || s.Throughput != 100 || s.MeanHold != 50*time.Millisecond || s.Little != 5 {
		t.Fatalf("evidence %+v, want both replicas' 100/s", s)
	}
	if got := o.Local("catalog", start, start+1); len(got) != 2 || got[start].Requests != 50 {
		t.Errorf("local counts %v, want 50 in each of 2 seconds", got)
	}
	o.SetPeers(fakePeers{err: errors.New("redis down")})
	if _, err := o.Suggest("catalog", bulkhead.Settings{MaxConcurrent: 50}, params()); err == nil {
		t.Error("suggested from this replica's half while the peers could not be read")
	}
}

// Outcome counts run since the bulkhead was first observed, past History,
// and go with the bulkhead.
func TestOutcomes(t *testing.T) {
	fc := clock.NewFake(epoch)
	o := New(fc)
	if s, f, a := o.Outcomes("catalog"); s+f+a != 0 {
		t.Fatalf("outcomes before any request = %d %d %d", s, f, a)
	}
	o.Ended("catalog", bulkhead.Success, time.Millisecond)
	o.Ended("catalog", bulkhead.Failure, time.Millisecond)
	fc.Advance(2 * History) // past every bucket
	o.Ended("catalog", bulkhead.Failure, time.Millisecond)
	o.Ended("catalog", bulkhead.Aborted, time.Millisecond)
	o.Ended("orders", bulkhead.Success, time.Millisecond)
	if s, f, a := o.Outcomes("catalog"); s != 1 || f != 2 || a != 1 {
		t.Errorf("catalog outcomes = %d %d %d, want 1 2 1", s, f, a)
	}
	o.Retain(map[string]bool{"orders": true})
	if s, f, a := o.Outcomes("catalog"); s+f+a != 0 {
		t.Errorf("outcomes of a bulkhead gone = %d %d %d, want none", s, f, a)
	}
	if s, f, a := o.Outcomes("orders"); s != 1 || f+a != 0 {
		t.Errorf("orders outcomes = %d %d %d, want 1 0 0", s, f, a)
	}
}
