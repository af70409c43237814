package main

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// The state names the main reason of the rejections, not SHEDDING for all.
func TestState(t *testing.T) {
	rejecting := func(by map[string]float64) bulkheadRow {
		r := bulkheadRow{known: true, limit: 10, active: 10, queued: 20, rejectedBy: by}
		for _, x := range by {
			r.rejected += x
		}
		return r
	}
	tests := []struct {
		name string
		row  bulkheadRow
		want string
	}{
		{"not exported", bulkheadRow{}, "?"},
		{"idle", bulkheadRow{known: true, limit: 10, active: 2}, "ok"},
		{"queueing", bulkheadRow{known: true, limit: 10, active: 8, queued: 3}, "queueing"},
		{"full", bulkheadRow{known: true, limit: 10, active: 10}, "FULL"},
		{"full and queueing", bulkheadRow{known: true, limit: 10, active: 10, queued: 3}, "FULL"},
		{"queue full", rejecting(map[string]float64{"queue_full": 5}), "REJECTING"},
		{"shed", rejecting(map[string]float64{"shed": 5}), "SHEDDING"},
		{"timeouts", rejecting(map[string]float64{"timeout": 5}), "TIMEOUTS"},
		{"unknown bulkhead", rejecting(map[string]float64{"unknown_bulkhead": 1}), "DENYING"},
		{"circuit open", rejecting(map[string]float64{"circuit_open": 1}), "OPEN"},
		{"shed dominates", rejecting(map[string]float64{"queue_full": 2, "shed": 7, "timeout": 3}), "SHEDDING"},
		{"timeouts dominate", rejecting(map[string]float64{"queue_full": 2, "shed": 1, "timeout": 3}), "TIMEOUTS"},
		{"queue full dominates", rejecting(map[string]float64{"queue_full": 9, "shed": 1}), "REJECTING"},
		{"tie: the first in display order", rejecting(map[string]float64{"timeout": 4, "shed": 4}), "SHEDDING"},
		{"unknown reason only", rejecting(map[string]float64{"other": 2}), "REJECTING"},
		{"rejecting while not full", bulkheadRow{known: true, limit: 10, active: 1, rejected: 2, rejectedBy: map[string]float64{"timeout": 2}}, "TIMEOUTS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := state(tt.row); got != tt.want {
				t.Errorf("state(%+v) = %q, want %q", tt.row, got, tt.want)
			}
		})
	}
	for reason := range rejectingStates {
		if !strings.Contains(strings.Join(reasons, " "), reason) {
			t.Errorf("rejectingStates names %q, which reasons lacks", reason)
		}
	}
	for _, reason := range reasons {
		if rejectingStates[reason] == "" {
			t.Errorf("reason %q has no state", reason)
		}
	}
}

// Requests in flight when traffic stopped are accounted for: those cut
// short show as cancelled, not as a gap between sent and the answers, and
// the rest as finished.
func TestSummaryCountsCancelled(t *testing.T) {
	var out strings.Builder
	d := newDemo(options{}, &out)
	d.start = time.Now()
	d.inFlightAtStop, d.drainCut = 12, "by Ctrl-C"
	d.flows = demoFlows()
	for _, f := range d.flows {
		f.result = testbed.Stats{Sent: 10, ByStatus: map[int]int{200: 7}}
		if f.route == "catalog" {
			f.result.Cancelled = 3
		} else {
			f.result.ByStatus[200] = 10
		}
	}
	d.summary(nil)
	got := out.String()
	for _, want := range []string{
		"route       sent      ok  rejected  errors cancelled ",
		"\ncatalog       30      21         0       0         9 ",
		"\nauth          10      10         0       0         0 ",
		"(cancelled: in flight when traffic stopped and not finished when the wait for them ended;\n",
		" not sent: due while 300 requests of the flow were out)\n",
		"12 requests were in flight when traffic stopped: 3 finished and are counted above, 9 were cancelled by Ctrl-C.\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}

	out.Reset()
	for _, f := range d.flows {
		f.result.Cancelled = 0
	}
	d.summary(nil)
	if want := "12 requests were in flight when traffic stopped: all finished and are counted above.\n"; !strings.Contains(out.String(), want) {
		t.Errorf("summary without cancelled requests lacks %q:\n%s", want, out.String())
	}
	out.Reset()
	d.inFlightAtStop = 0
	d.summary(nil)
	if want := "No request was in flight when traffic stopped.\n"; !strings.Contains(out.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, out.String())
	}
}

// The port check covers every port the embedded config's daemon listens on,
// the admin API's default included.
func TestDaemonPortsMatchConfig(t *testing.T) {
	cfg, err := config.Parse("demo.yaml", demoConfig)
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{}
	for _, p := range daemonPorts {
		checked[net.JoinHostPort("127.0.0.1", strconv.Itoa(p.number))] = true
	}
	for _, addr := range []string{cfg.Listen.GRPC, cfg.Listen.HTTP, cfg.Listen.Admin} {
		if !checked[addr] {
			t.Errorf("daemon listens on %s, which checkPorts does not check (%v)", addr, daemonPorts)
		}
	}
	if len(daemonPorts) != 3 {
		t.Errorf("daemonPorts = %v, want the three listeners", daemonPorts)
	}
}
