package bulkhead

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestCeiling(t *testing.T) {
	tests := []struct {
		name             string
		s                Settings
		crit, norm, best int
	}{
		{"no reserves", Settings{MaxConcurrent: 10}, 10, 10, 10},
		{"design example", Settings{MaxConcurrent: 10, ReserveCritical: 0.2, ReserveNormal: 0.1}, 10, 8, 7},
		{"float-exact tenth", Settings{MaxConcurrent: 10, ReserveCritical: 0.1}, 10, 9, 9},
		{"small limit rounds reserve up", Settings{MaxConcurrent: 3, ReserveCritical: 0.1}, 3, 2, 2},
		{"limit one", Settings{MaxConcurrent: 1}, 1, 1, 1},
		{"big", Settings{MaxConcurrent: 1000, ReserveCritical: 0.05, ReserveNormal: 0.15}, 1000, 950, 800},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := [3]int{tt.s.Ceiling(Critical), tt.s.Ceiling(Normal), tt.s.Ceiling(BestEffort)}
			want := [3]int{tt.crit, tt.norm, tt.best}
			if got != want {
				t.Fatalf("ceilings = %v, want %v", got, want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		s     Settings
		wants []string // substrings; nil = valid
	}{
		{"valid", Settings{MaxConcurrent: 5, MaxQueue: 3, ReserveCritical: 0.2}, nil},
		{"zero limit", Settings{}, []string{"max_concurrent: must be at least 1"}},
		{"everything wrong", Settings{MaxConcurrent: -1, MaxQueue: -2, MaxWait: -1, ReserveCritical: 1, ReserveNormal: math.NaN()},
			[]string{"max_concurrent", "max_queue", "max_wait", "reserve.critical", "reserve.normal"}},
		{"reserves leave nothing", Settings{MaxConcurrent: 2, ReserveCritical: 0.5, ReserveNormal: 0.5},
			[]string{"leave best_effort no permit of max_concurrent 2"}},
		{"reserves sum too high", Settings{MaxConcurrent: 10, ReserveCritical: 0.6, ReserveNormal: 0.4},
			[]string{"leave best_effort no permit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate()
			if tt.wants == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidSettings) {
				t.Fatalf("Validate() = %v, want ErrInvalidSettings", err)
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestParsePriority(t *testing.T) {
	for _, p := range Priorities() {
		got, err := ParsePriority(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePriority(%q) = %v, %v", p.String(), got, err)
		}
	}
	for _, bad := range []string{"", "Critical", "high", "best-effort", "normal "} {
		if _, err := ParsePriority(bad); !errors.Is(err, ErrUnknownPriority) {
			t.Errorf("ParsePriority(%q) err = %v, want ErrUnknownPriority", bad, err)
		}
	}
}

func TestReasonOf(t *testing.T) {
	for _, e := range []*Rejection{ErrQueueFull, ErrShed, ErrTimeout, ErrClosed} {
		wrapped := errors.Join(errors.New("ctx"), e)
		if ReasonOf(wrapped) != e.Reason() || !errors.Is(wrapped, e) {
			t.Errorf("%v: ReasonOf/Is lost through wrapping", e)
		}
	}
	if ReasonOf(errors.New("x")) != ReasonNone {
		t.Error("plain error has a reason")
	}
	seen := map[string]bool{}
	for _, r := range Reasons() {
		if seen[r.String()] || r.String() == "invalid" {
			t.Errorf("reason label %q duplicated or invalid", r)
		}
		seen[r.String()] = true
	}
}
