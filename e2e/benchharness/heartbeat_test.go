package main

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

func TestParseSchedstat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want time.Duration
		runs int64
		ok   bool
	}{
		{"plain", "343494 68258 12\n", 343494 * time.Nanosecond, 12, true},
		{"two fields", "343494 68258\n", 0, 0, false},
		{"not a number", "x 1 2\n", 0, 0, false},
		{"negative", "-5 1 2\n", 0, 0, false},
		{"runs not a number", "5 1 x\n", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, runs, err := parseSchedstat([]byte(tt.in))
			if (err == nil) != tt.ok || got != tt.want || runs != tt.runs {
				t.Fatalf("parseSchedstat = %v, %v, %v; want %v, %v, ok=%v", got, runs, err, tt.want, tt.runs, tt.ok)
			}
		})
	}
}

// TestThreadsCPU reads this process's threads, which have run.
func TestThreadsCPU(t *testing.T) {
	d, runs, err := threadsCPU(os.Getpid())
	if err != nil || d <= 0 || runs <= 0 {
		t.Fatalf("threadsCPU = %v, %v, %v", d, runs, err)
	}
	if _, _, err := threadsCPU(-1); err == nil {
		t.Fatal("no such process: want an error")
	}
}

func TestRequestDelay(t *testing.T) {
	tests := []struct {
		line string
		want time.Duration
		ok   bool
	}{
		{"GET /delay/2s HTTP/1.1", 2 * time.Second, true},
		{"GET " + delayPath(time.Millisecond) + " HTTP/1.1", time.Millisecond, true},
		{"GET / HTTP/1.1", 0, false},
		{"GET /delay/soon HTTP/1.1", 0, false},
		{"GET /delay/-1s HTTP/1.1", 0, false},
		{"GET /delay/1s", 0, false},
	}
	for _, tt := range tests {
		got, ok := requestDelay([]byte(tt.line))
		if got != tt.want || ok != tt.ok {
			t.Errorf("requestDelay(%q) = %v, %v; want %v, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}

func TestReadRequestNamesDelay(t *testing.T) {
	br := bufio.NewReader(strings.NewReader("GET /delay/5ms HTTP/1.1\r\nhost: x\r\n\r\nGET / HTTP/1.1\r\n\r\n"))
	if d, named, err := readRequest(br); err != nil || !named || d != 5*time.Millisecond {
		t.Fatalf("first request: %v, %v, %v", d, named, err)
	}
	if d, named, err := readRequest(br); err != nil || named || d != 0 {
		t.Fatalf("second request: %v, %v, %v", d, named, err)
	}
}

// TestUpstreamDelayPath: a request naming its delay waits that long, the
// others the upstream's own delay (none here).
func TestUpstreamDelayPath(t *testing.T) {
	u := startUpstream(t, 0)
	h := newConn(u.Addr(), delayPath(30*time.Millisecond))
	defer h.close()
	if status, err := h.do(t.Context()); err != nil || status != 200 {
		t.Fatalf("%d, %v", status, err)
	}
	if _, busy := u.Stats(); busy < 30*time.Millisecond {
		t.Fatalf("upstream busy %v, want at least the 30ms the path named", busy)
	}
}

func TestClosedLoopStaggered(t *testing.T) {
	u := startUpstream(t, 0)
	s := runClosedPath(t.Context(), u.Addr(), delayPath(10*time.Millisecond), 4, 40*time.Millisecond,
		60*time.Millisecond, 100*time.Millisecond, func(bool) {})
	if s.Requests == 0 || s.Errors != 0 || s.NonOK != 0 {
		t.Fatalf("stats %+v", s)
	}
	for _, l := range s.Latencies {
		if l < 10*time.Millisecond {
			t.Fatalf("latency %v under the 10ms the path named", l)
		}
	}
}

func TestEntriesDelta(t *testing.T) {
	scrape := func(renewed, released int) *testbed.Metrics {
		text := "# TYPE bulkhead_access_log_entries_total counter\n" +
			`bulkhead_access_log_entries_total{result="renewed"} ` + itoa(renewed) + "\n" +
			`bulkhead_access_log_entries_total{result="released"} ` + itoa(released) + "\n" +
			`bulkhead_access_log_entries_total{result="unknown"} 3` + "\n"
		m, err := testbed.ParseMetrics(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	got := entriesDelta(scrape(10, 100), scrape(25, 160))
	if len(got) != 2 || got["renewed"] != 15 || got["released"] != 60 {
		t.Fatalf("entriesDelta = %v; want renewed 15, released 60, unknown left out", got)
	}
}

func TestShortRate(t *testing.T) {
	tests := []struct {
		name  string
		rate  float64
		best  float64
		wants float64
	}{
		{"fixed", 700, 9000, 700},
		{"half the bulkhead's median", 0, 9001, 4501},
		{"no closed loop", 0, 0, fallbackShortRate},
	}
	for _, tt := range tests {
		if got := (&HeartbeatPlan{Rate: tt.rate}).shortRate(tt.best); got != tt.wants {
			t.Errorf("%s: shortRate = %v, want %v", tt.name, got, tt.wants)
		}
	}
}

// hbPhase is a heartbeat measurement: requests in the window, the daemon's
// and Envoy's CPU per request, periodic entries.
func hbPhase(mix, config string, round int, requests int64, daemonUs, envoyUs float64, periodic int64) Phase {
	p := Phase{Loop: LoopHeartbeat, Mix: mix, Config: config, Round: round, Requests: requests, RPS: float64(requests),
		CPU: map[string]CPUUse{"sidecar": {UsPerRequest: daemonUs}, "envoy": {UsPerRequest: envoyUs}}}
	if periodic > 0 {
		p.AccessLog = map[string]int64{periodicResult: periodic}
	}
	return p
}

func TestHeartbeatCosts(t *testing.T) {
	phases := []Phase{
		{Loop: "closed", Config: Bulkhead, Requests: 5000}, // not the phase's
		// Short: the medians are 82 (on) and 80 (off); the outliers fall out.
		hbPhase(MixShort, HeartbeatOn, 1, 3000, 82, 200, 0),
		hbPhase(MixShort, HeartbeatOff, 1, 3000, 80, 190, 0),
		hbPhase(MixShort, HeartbeatOn, 2, 3000, 150, 400, 0),
		hbPhase(MixShort, HeartbeatOff, 2, 3000, 79, 180, 0),
		hbPhase(MixShort, HeartbeatOn, 3, 3000, 81, 210, 0),
		hbPhase(MixShort, HeartbeatOff, 3, 3000, 95, 195, 0),
		hbPhase(MixShort, HeartbeatOff, 4, 0, 0, 0, 0), // served nothing: left out
		// Long: 2 periodic entries per request; 20 us more per request on
		// the daemon, 30 on Envoy: 10 and 15 per periodic entry.
		hbPhase(MixLong, HeartbeatOn, 1, 600, 120, 300, 1200),
		hbPhase(MixLong, HeartbeatOff, 1, 600, 100, 270, 0),
		// A single unbuffered logger: 80 and 100 us per periodic entry.
		hbPhase(MixLong, HeartbeatSingle, 1, 600, 260, 470, 1200),
	}
	got := heartbeatCosts(phases)
	if len(got) != 2 || got[0].Mix != MixShort || got[1].Mix != MixLong {
		t.Fatalf("heartbeatCosts = %+v", got)
	}
	short, long := got[0], got[1]
	if short.On.Rounds != 3 || short.Off.Rounds != 3 || short.On.DaemonUs != 82 || short.Off.DaemonUs != 80 ||
		short.On.EnvoyUs != 210 || short.Off.EnvoyUs != 190 {
		t.Fatalf("short = %+v", short)
	}
	if short.DaemonRatio != 1.025 || short.EnvoyRatio != 1.105 || short.DaemonUsPerPeriodic != nil {
		t.Fatalf("short ratios = %v, %v, per periodic %v", short.DaemonRatio, short.EnvoyRatio, short.DaemonUsPerPeriodic)
	}
	if long.On.PeriodicPerRequest != 2 || long.DaemonUsPerPeriodic == nil || *long.DaemonUsPerPeriodic != 10 ||
		long.EnvoyUsPerPeriodic == nil || *long.EnvoyUsPerPeriodic != 15 || long.DaemonRatio != 1.2 {
		t.Fatalf("long = %+v", long)
	}
	if short.Single != nil {
		t.Fatalf("short single log = %+v, want nil (not measured)", short.Single)
	}
	if s := long.Single; s == nil || s.Setting.Rounds != 1 || s.DaemonUsPerPeriodic == nil || *s.DaemonUsPerPeriodic != 80 ||
		s.EnvoyUsPerPeriodic == nil || *s.EnvoyUsPerPeriodic != 100 || s.DaemonRatio != 2.6 {
		t.Fatalf("long single log = %+v", s)
	}

	g := heartbeatGoal(got)
	if g.Met == nil || !*g.Met || !strings.Contains(g.Measured, "+2.5%") || !strings.Contains(g.Note, "10.0 us of daemon CPU per periodic entry (80.0 with a single unbuffered logger; Envoy 15.0 vs 100.0)") {
		t.Fatalf("goal = %+v", g)
	}
	if g := heartbeatGoal(heartbeatCosts(phases[1:2])); g.Met != nil {
		t.Fatalf("heartbeats off never measured: goal = %+v, want not measured", g)
	}
	phases[1].CPU["sidecar"] = CPUUse{UsPerRequest: 90}
	if g := heartbeatGoal(heartbeatCosts(phases)); g.Met == nil || *g.Met {
		t.Fatalf("short on 90 vs 80 us: goal = %+v, want not met", g)
	}
}

func TestHeartbeatProblems(t *testing.T) {
	tests := []struct {
		name string
		p    Phase
		want int
	}{
		{"on, long, periodic entries", hbPhase(MixLong, HeartbeatOn, 1, 600, 1, 1, 1200), 0},
		{"on, long, none", hbPhase(MixLong, HeartbeatOn, 1, 600, 1, 1, 0), 1},
		{"on, short, none", hbPhase(MixShort, HeartbeatOn, 1, 600, 1, 1, 0), 0},
		{"off, periodic entries", hbPhase(MixLong, HeartbeatOff, 1, 600, 1, 1, 5), 1},
		{"off, unknown tokens", Phase{Config: HeartbeatOff, Mix: MixShort, AccessLog: map[string]int64{"unknown": 2}}, 1},
		{"single log, long, none", hbPhase(MixLong, HeartbeatSingle, 1, 600, 1, 1, 0), 1},
		// Batched periodic entries flushed after their request's end: expected.
		{"on, late periodic entries", Phase{Config: HeartbeatOn, Mix: MixLong, AccessLog: map[string]int64{"renewed": 900, "late": 300}}, 0},
		{"single log, duplicates", Phase{Config: HeartbeatSingle, Mix: MixLong, AccessLog: map[string]int64{"renewed": 900, "duplicate": 3}}, 1},
	}
	for _, tt := range tests {
		if got := heartbeatProblems(tt.p); len(got) != tt.want {
			t.Errorf("%s: %q, want %d problem(s)", tt.name, got, tt.want)
		}
	}
}

func TestWriteHeartbeatSection(t *testing.T) {
	r := &Results{Plan: quickPlan(), Phases: []Phase{
		hbPhase(MixShort, HeartbeatOn, 1, 3000, 82, 200, 0),
		hbPhase(MixShort, HeartbeatOff, 1, 3000, 80, 190, 0),
		hbPhase(MixLong, HeartbeatOn, 1, 600, 120, 300, 900),
		hbPhase(MixLong, HeartbeatOff, 1, 600, 100, 270, 0),
		hbPhase(MixLong, HeartbeatSingle, 1, 600, 260, 470, 1200),
	}}
	r.Phases[0].TargetRPS = 3000
	r.Phases[2].AccessLog["late"] = 300 // late periodic entries count
	r.evaluate()
	var b strings.Builder
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Heartbeat cost", "| short | 3000 req/s, upstream 1ms | on, batched log | 82.0 | 1.025x |",
		"| short | 3000 req/s, upstream 1ms | off | 80.0 | - |",
		"| long | 200 in flight, upstream 2s | on, batched log | 120.0 | 1.200x | 300.0 | 1.111x | 2.00 | 10.0 | 15.0 |",
		"| long | 200 in flight, upstream 2s | on, single log | 260.0 | 2.600x | 470.0 | 1.741x | 2.00 | 80.0 | 100.0 |",
		"| long | 1 | on, batched log | 600 | 120.0 | 300.0 | 1200 |", "| long | 1 | on, single log | 600 | 260.0 | 470.0 | 1200 |",
		"Heartbeats: extra daemon CPU at the bench's mix"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("results.md lacks %q:\n%s", want, b.String())
		}
	}
}
