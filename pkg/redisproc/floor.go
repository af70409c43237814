package redisproc

import (
	"context"
	"fmt"
	"time"
)

// FloorWindow is how long the measurement tools watch a bare server idle
// (IdleFloor): 30 runs of its serverCron (hz 10) and three of its
// once-a-second jobs. On the 2-core development VM a bare redis-server
// 7.0 used 1.4-2.7 ms of CPU in each second of 20 (mean 1.96 ms/s; the
// first seconds after its start no different), and 1.8-2.3 ms/s over
// each 3-second stretch of them: within about 0.3 ms/s of the mean, which
// at 2,800 requests a second is 0.1 us per request, a tenth of issue 25's
// goal of 1 us. A longer window would narrow that further at the price of
// every run's start.
const FloorWindow = 3 * time.Second

// Floor is what a server used of the CPU on its own, idle: over Window,
// with no client but the Server's own INFO connection and no command but
// the INFO at each end, it used CPU (used_cpu_sys + used_cpu_user): its
// timers (serverCron: clients, expiry, statistics), which it runs whatever
// its clients do. A figure of Redis's CPU per request less the floor over
// the same time is what the clients cost it, their periodic calls
// included. A Floor is a value.
type Floor struct {
	Window time.Duration `json:"window_ns"`
	CPU    time.Duration `json:"cpu_ns"`
}

// MsPerSecond is the floor's CPU in milliseconds a second (0 for a Floor
// with no window).
func (f Floor) MsPerSecond() float64 {
	if f.Window <= 0 {
		return 0
	}
	return float64(f.CPU) / float64(time.Millisecond) / f.Window.Seconds()
}

// Above is cpu, used over window, less what the floor's rate uses over as
// long: the server's CPU beyond its own idle work. It is negative when
// the server used less than its floor's rate (a window quieter than the
// floor's, within the floor's spread). A Floor with no window takes
// nothing off.
func (f Floor) Above(cpu, window time.Duration) time.Duration {
	if f.Window <= 0 {
		return cpu
	}
	return cpu - time.Duration(float64(f.CPU)*(float64(window)/float64(f.Window)))
}

// IdleFloor watches s for window and returns its CPU over it, from INFO
// cpu at each end: the caller starts it before any other client connects
// and connects none until it returns. It returns early with ctx's error.
func (s *Server) IdleFloor(ctx context.Context, window time.Duration) (Floor, error) {
	a, err := s.Info(ctx)
	if err != nil {
		return Floor{}, err
	}
	start := time.Now()
	t := time.NewTimer(window)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return Floor{}, fmt.Errorf("%w on %s: idle floor: %w", ErrRedis, s.addr, ctx.Err())
	case <-t.C:
	}
	b, err := s.Info(ctx)
	if err != nil {
		return Floor{}, err
	}
	return Floor{Window: time.Since(start), CPU: b.CPU - a.CPU}, nil
}
