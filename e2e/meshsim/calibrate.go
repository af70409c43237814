package meshsim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// Calibration compares the daemon's CPU per request under one real Envoy
// and under one simulated Envoy, at the same rate, mix and routes.
type Calibration struct {
	Rate     float64   `json:"rate"`
	Rounds   int       `json:"rounds"`
	Window   float64   `json:"window_s"`
	EnvoyCPU float64   `json:"envoy_cpu_us_per_request"` // medians of the rounds
	SimCPU   float64   `json:"sim_cpu_us_per_request"`
	EnvoyAll []float64 `json:"envoy_rounds"`
	SimAll   []float64 `json:"sim_rounds"`
}

// calibrationRoutes are the calibration's bulkheads: no limit the load
// reaches, so that both runs admit every request.
func calibrationRoutes() []Route {
	return []Route{{Bulkhead: "cal-0"}, {Bulkhead: "cal-1"}, {Bulkhead: "cal-2"}, {Bulkhead: "cal-3"}}
}

// calibrate runs rounds of window each, a real Envoy's and the
// simulator's in turn, against one daemon.
func calibrate(ctx context.Context, log *slog.Logger, bin, dir, envoyBin string, rate float64, window time.Duration, rounds int) (*Calibration, error) {
	routes := calibrationRoutes()
	const tenants = 20
	addr, err := FreePort()
	if err != nil {
		return nil, err
	}
	d, err := StartDaemon(ctx, bin, dir, DaemonConfig(addr, routes, true, LedgerMemory.yaml("")))
	if err != nil {
		return nil, err
	}
	defer d.Stop()
	up, err := testbed.NewUpstream("calibration", "")
	if err != nil {
		return nil, err
	}
	defer up.Close()
	upEP, err := endpointOf(up.Addr())
	if err != nil {
		return nil, err
	}
	sideEP, err := endpointOf(d.GRPC)
	if err != nil {
		return nil, err
	}
	var ers []envoy.Route
	for _, r := range routes {
		ers = append(ers, envoy.Route{Name: r.Bulkhead, Prefix: "/" + r.Bulkhead, Upstream: upEP})
	}
	bootstrap, err := envoy.Render(envoy.Params{NodeID: "calibration", Bulkhead: sideEP, Routes: ers})
	if err != nil {
		return nil, err
	}
	proxy, err := envoyproc.Start(ctx, envoyproc.Options{Binary: envoyBin, ConfigYAML: bootstrap, Concurrency: 2})
	if err != nil {
		return nil, err
	}
	defer func() { _ = proxy.Stop(context.WithoutCancel(ctx)) }()
	front, err := proxy.ListenerAddr(ctx, envoy.DefaultListenerName)
	if err != nil {
		return nil, err
	}
	m, err := New(Config{Targets: []string{d.GRPC}, Envoys: 1, Workers: 2, Routes: routes, Tenants: tenants, Node: "calibration-sim"})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	streamCtx, stop := context.WithCancel(ctx)
	defer stop()
	if err := sleep(ctx, defaultRecoveryWindow+500*time.Millisecond); err != nil {
		return nil, err
	}
	// Warm both up: streams open, connections made.
	if _, err := driveEnvoy(ctx, front, routes, tenants, rate, 3*time.Second); err != nil {
		return nil, err
	}
	m.Run(ctx, streamCtx, rate, 3*time.Second)

	c := &Calibration{Rate: rate, Rounds: rounds, Window: window.Seconds()}
	for round := range rounds {
		for _, sim := range []bool{false, true} {
			cpu, err := measureCPU(ctx, d, func() error {
				if sim {
					m.Run(ctx, streamCtx, rate, window)
					return ctx.Err()
				}
				_, err := driveEnvoy(ctx, front, routes, tenants, rate, window)
				return err
			})
			if err != nil {
				return nil, err
			}
			if sim {
				c.SimAll = append(c.SimAll, cpu)
			} else {
				c.EnvoyAll = append(c.EnvoyAll, cpu)
			}
			log.Info("calibration", "round", round+1, "simulator", sim, "cpu_us_per_request", cpu)
		}
	}
	c.EnvoyCPU, c.SimCPU = median(c.EnvoyAll), median(c.SimAll)
	return c, nil
}

// measureCPU runs load and returns the daemon's CPU per Check it answered
// meanwhile (admitted and rejected, from its counters), in microseconds.
func measureCPU(ctx context.Context, d *Daemon, load func() error) (float64, error) {
	count := func() (float64, error) {
		mm, err := d.Metrics(ctx)
		if err != nil {
			return 0, err
		}
		return sumOf(mm, "bulkhead_admitted_total") + sumOf(mm, "bulkhead_rejected_total"), nil
	}
	n0, err := count()
	if err != nil {
		return 0, err
	}
	u0, err := d.Usage()
	if err != nil {
		return 0, err
	}
	if err := load(); err != nil {
		return 0, err
	}
	// The last requests' end entries.
	if err := sleep(ctx, 3*time.Second); err != nil {
		return 0, err
	}
	u1, err := d.Usage()
	if err != nil {
		return 0, err
	}
	n1, err := count()
	if err != nil {
		return 0, err
	}
	if n1 <= n0 {
		return 0, fmt.Errorf("%w: no Checks answered", ErrDaemon)
	}
	return float64((u1.CPU - u0.CPU).Microseconds()) / (n1 - n0), nil
}

// driveEnvoy sends requests through a real Envoy at rate for d, open loop,
// with the simulator's duration mix (the upstream waits as the header
// says) and tenants, and waits for them; it returns how many answered 200.
func driveEnvoy(ctx context.Context, front string, routes []Route, tenants int, rate float64, d time.Duration) (int64, error) {
	mix := Config{}.withDefaults().Durations
	var pickDur weighted[DurationShare]
	for _, x := range mix {
		pickDur.add(x, x.Weight)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	rng := rand.New(rand.NewPCG(1, 2))
	var ok atomic.Int64
	var outstanding atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-tick.C:
			el := now.Sub(start)
			if el >= d {
				break loop
			}
			for due := int(rate * el.Seconds()); sent < due; sent++ {
				if outstanding.Load() >= 20000 {
					continue
				}
				r := routes[rng.IntN(len(routes))]
				delay := pickDur.pick(rng).Duration
				tenant := fmt.Sprintf("tenant-%04d", rng.IntN(tenants))
				outstanding.Add(1)
				wg.Go(func() {
					defer outstanding.Add(-1)
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+front+"/"+r.Bulkhead+"/items?page=2", nil)
					if err != nil {
						return
					}
					req.Header.Set(testbed.HeaderDelay, delay.String())
					req.Header.Set(captureTenant, tenant)
					resp, err := client.Do(req)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						ok.Add(1)
					}
				})
			}
		}
	}
	wg.Wait()
	return ok.Load(), ctx.Err()
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
