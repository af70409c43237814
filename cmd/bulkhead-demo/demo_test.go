package main

import (
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
)

// TestEmbeddedConfig checks that demo.yaml is valid, has the documented
// bulkheads, and agrees with the demo's routes and envoy.DemoParams.
func TestEmbeddedConfig(t *testing.T) {
	cfg, err := config.Parse("demo.yaml", demoConfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen.GRPC != "127.0.0.1:9001" || cfg.Listen.HTTP != "127.0.0.1:9090" {
		t.Errorf("listen = %+v, want the demo's fixed ports", cfg.Listen)
	}
	want := map[string]bulkhead.Settings{
		"catalog": {MaxConcurrent: 10, MaxQueue: 20, MaxWait: 500 * time.Millisecond, ReserveCritical: 0.2, ReserveNormal: 0.1},
		"auth":    {MaxConcurrent: 50, MaxQueue: 50, MaxWait: 250 * time.Millisecond},
		"orders":  {MaxConcurrent: 30, MaxQueue: 30, MaxWait: 250 * time.Millisecond},
	}
	if len(cfg.Bulkheads) != len(want) {
		t.Errorf("config has %d bulkheads, want %d", len(cfg.Bulkheads), len(want))
	}
	for name, s := range want {
		if got := cfg.Bulkheads[name].Settings; got != s {
			t.Errorf("bulkhead %s = %+v, want %+v", name, got, s)
		}
	}

	params := envoy.DemoParams()
	if len(params.Routes) != len(demoRoutes) {
		t.Fatalf("envoy.DemoParams has %d routes, the demo %d", len(params.Routes), len(demoRoutes))
	}
	for i, r := range demoRoutes {
		er := params.Routes[i]
		if er.BulkheadName() != r.name || er.Upstream.String() != r.upstream || len(r.path) < len(er.Prefix) || r.path[:len(er.Prefix)] != er.Prefix {
			t.Errorf("route %d: demo %+v, envoy %+v", i, r, er)
		}
		if _, ok := want[r.name]; !ok {
			t.Errorf("route %s has no bulkhead in demo.yaml", r.name)
		}
		if shares := cfg.Bulkheads[r.name].Shares.Mode != 0; er.Shares != shares {
			t.Errorf("route %s: Envoy's share route %v, demo.yaml's shares mode %v: they must agree", r.name, er.Shares, cfg.Bulkheads[r.name].Shares.Mode)
		}
	}
	if params.ExtAuthzTimeout != 0 && params.ExtAuthzTimeout <= want["catalog"].MaxWait {
		t.Errorf("Envoy's ext_authz timeout %v does not exceed catalog's max_wait", params.ExtAuthzTimeout)
	}
}

func TestDemoFlowsRoutes(t *testing.T) {
	known := map[string]bool{}
	for _, r := range demoRoutes {
		known[r.name] = true
	}
	for _, f := range demoFlows() {
		if !known[f.route] || f.rate <= 0 {
			t.Errorf("flow %+v: unknown route or no rate", f)
		}
		if f.priority != "" {
			if _, err := bulkhead.ParsePriority(f.priority); err != nil {
				t.Errorf("flow %+v: %v", f, err)
			}
		}
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args []string
		ok   bool
		want options
	}{
		{nil, true, options{slowAfter: 10 * time.Second, slowFor: 15 * time.Second, slowDelay: 2 * time.Second,
			drainTimeout: defaultDrainTimeout, printEvery: time.Second}},
		{[]string{"--duration", "60s", "--config", "x.yaml", "--drain-timeout", "1s"}, true,
			options{duration: time.Minute, configPath: "x.yaml", slowAfter: 10 * time.Second, slowFor: 15 * time.Second, slowDelay: 2 * time.Second,
				drainTimeout: time.Second, printEvery: time.Second}},
		{[]string{"--duration", "-1s"}, false, options{}},
		{[]string{"extra"}, false, options{}},
		{[]string{"--nope"}, false, options{}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			got, err := parseFlags(tc.args, io.Discard)
			if (err == nil) != tc.ok {
				t.Fatalf("parseFlags error = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseFlags = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestFormatting(t *testing.T) {
	tests := []struct{ got, want string }{
		{fmtDur(0), "-"},
		{fmtDur(400 * time.Microsecond), "0.4ms"},
		{fmtDur(12 * time.Millisecond), "12ms"},
		{fmtDur(2010 * time.Millisecond), "2.01s"},
		{fmtSeconds(1600 * time.Millisecond), "2s"},
		{fmtReasons(nil, "%.0f"), "-"},
		{fmtReasons(map[string]float64{"zz": 1, "timeout": 2, "queue_full": 3, "shed": 0}, "%.0f"), "queue_full=3 timeout=2 zz=1"},
	}
	for i, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("case %d: got %q, want %q", i, tc.got, tc.want)
		}
	}
}
