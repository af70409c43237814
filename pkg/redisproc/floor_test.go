package redisproc

import (
	"testing"
	"time"
)

// TestFloorAbove: a floor of 6 ms over 3 s (2 ms a second) taken off a
// window's CPU.
func TestFloorAbove(t *testing.T) {
	floor := Floor{Window: 3 * time.Second, CPU: 6 * time.Millisecond}
	tests := []struct {
		name        string
		floor       Floor
		cpu, window time.Duration
		want        time.Duration
	}{
		// 10 s at 2 ms/s: 20 ms of 50 ms was the floor's.
		{"a busy window", floor, 50 * time.Millisecond, 10 * time.Second, 30 * time.Millisecond},
		{"a window shorter than the floor's", floor, 3 * time.Millisecond, time.Second, time.Millisecond},
		{"only the floor", floor, 20 * time.Millisecond, 10 * time.Second, 0},
		{"quieter than the floor", floor, 15 * time.Millisecond, 10 * time.Second, -5 * time.Millisecond},
		{"no floor measured", Floor{}, 50 * time.Millisecond, 10 * time.Second, 50 * time.Millisecond},
		// A 20-minute window of a busy server: no overflow.
		{"long", Floor{Window: time.Hour, CPU: time.Hour}, 30 * time.Minute, 20 * time.Minute, 10 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.floor.Above(tt.cpu, tt.window); got != tt.want {
				t.Errorf("Above(%v, %v) = %v, want %v", tt.cpu, tt.window, got, tt.want)
			}
		})
	}
	if got := floor.MsPerSecond(); got != 2 {
		t.Errorf("MsPerSecond = %v, want 2", got)
	}
	if got := (Floor{}).MsPerSecond(); got != 0 {
		t.Errorf("no window: MsPerSecond = %v, want 0", got)
	}
}
