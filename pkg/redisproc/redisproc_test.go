package redisproc

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// infoText is what redis-server 7.0 answers to INFO commandstats cpu.
const infoText = "# CPU\r\nused_cpu_sys:0.250000\r\nused_cpu_user:1.007511\r\nused_cpu_sys_children:9.000000\r\n" +
	"used_cpu_user_children:9.000000\r\nused_cpu_sys_main_thread:0.200000\r\nused_cpu_user_main_thread:1.007384\r\n\r\n" +
	"# Commandstats\r\ncmdstat_client|setname:calls=1,usec=4,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_evalsha:calls=2000,usec=68000,usec_per_call=34.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_eval:calls=3,usec=300,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_time:calls=2000,usec=4000,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n"

func TestParseInfo(t *testing.T) {
	tests := []struct {
		name        string
		text        string
		calls, usec map[string]int64
		cpu         time.Duration
		scripts     int64
		ok          bool
	}{
		{"commandstats and cpu", infoText, map[string]int64{"client|setname": 1, "evalsha": 2000, "eval": 3, "time": 2000},
			map[string]int64{"client|setname": 4, "evalsha": 68000, "eval": 300, "time": 4000}, 1257511 * time.Microsecond, 2003, true},
		{"no command yet", "# CPU\nused_cpu_sys:0.5\nused_cpu_user:0.25\n# Commandstats\n", map[string]int64{}, map[string]int64{},
			750 * time.Millisecond, 0, true},
		{"no cpu section", "# Commandstats\ncmdstat_get:calls=1,usec=1\n", nil, nil, 0, 0, false},
		{"only the system time", "used_cpu_sys:0.5\n", nil, nil, 0, 0, false},
		{"calls missing", "used_cpu_sys:0\nused_cpu_user:0\ncmdstat_get:usec=1\n", nil, nil, 0, 0, false},
		{"usec missing", "used_cpu_sys:0\nused_cpu_user:0\ncmdstat_get:calls=1\n", nil, nil, 0, 0, false},
		{"calls not a number", "used_cpu_sys:0\nused_cpu_user:0\ncmdstat_get:calls=x,usec=1\n", nil, nil, 0, 0, false},
		{"negative calls", "used_cpu_sys:0\nused_cpu_user:0\ncmdstat_get:calls=-1,usec=1\n", nil, nil, 0, 0, false},
		{"cpu not a number", "used_cpu_sys:zero\nused_cpu_user:0\n", nil, nil, 0, 0, false},
		{"cpu infinite", "used_cpu_sys:Inf\nused_cpu_user:0\n", nil, nil, 0, 0, false},
		{"cpu NaN", "used_cpu_sys:NaN\nused_cpu_user:0\n", nil, nil, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseInfo(tt.text)
			if (err == nil) != tt.ok {
				t.Fatalf("ParseInfo: err %v, want ok=%v", err, tt.ok)
			}
			if !tt.ok {
				return
			}
			if !maps.Equal(got.Calls, tt.calls) || !maps.Equal(got.Usec, tt.usec) || got.CPU != tt.cpu || got.Scripts() != tt.scripts ||
				got.ScriptUsec() != tt.usec["evalsha"]+tt.usec["eval"] {
				t.Fatalf("ParseInfo = %v, %v, %v, %d scripts; want %v, %v, %v, %d", got.Calls, got.Usec, got.CPU, got.Scripts(),
					tt.calls, tt.usec, tt.cpu, tt.scripts)
			}
		})
	}
}

func FuzzParseInfo(f *testing.F) {
	f.Add(infoText)
	f.Add("used_cpu_sys:1\nused_cpu_user:2\ncmdstat_a:calls=3,usec=4\n")
	f.Fuzz(func(t *testing.T, text string) {
		r, err := ParseInfo(text)
		if err != nil {
			return
		}
		if r.CPU < 0 {
			t.Fatalf("negative CPU %v", r.CPU)
		}
		for cmd, n := range r.Calls {
			if u, ok := r.Usec[cmd]; n < 0 || u < 0 || !ok {
				t.Fatalf("%s: %d calls, %d us (%v)", cmd, n, u, ok)
			}
		}
	})
}

// TestStart starts a redis-server and reads its INFO.
func TestStart(t *testing.T) {
	if _, err := os.Stat(Binary); err != nil {
		if _, err := exec.LookPath("redis-server"); err != nil {
			t.Skipf("no redis-server: %v", err)
		}
	}
	s, err := Start(t.Context(), t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	// Idle, before any client: its own timers, at most a fraction of a core.
	f, err := s.IdleFloor(t.Context(), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if f.Window < 200*time.Millisecond || f.CPU < 0 || f.CPU > f.Window {
		t.Errorf("IdleFloor = %+v, want a window of 200 ms or more and a CPU within it", f)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if f, err := s.IdleFloor(ctx, time.Hour); err == nil {
		t.Errorf("IdleFloor with a cancelled context = %+v, want an error", f)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	if err := rdb.Eval(t.Context(), "return redis.call('TIME')", nil).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r.Calls["eval"] != 1 || r.Calls["time"] != 1 || r.Scripts() != 1 || r.CPU <= 0 || s.PID() <= 0 {
		t.Errorf("INFO after one EVAL: calls %v, cpu %v", r.Calls, r.CPU)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
}
