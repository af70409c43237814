package main

import (
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
)

func TestSuggest(t *testing.T) {
	e := newEnv(t)
	e.fake.Suggestions(
		admin.Sized{Name: "auth", Suggestion: sizing.Suggestion{Window: time.Minute, Requests: 12, Current: bulkhead.Settings{MaxConcurrent: 1}},
			Refused: sizing.ErrTooLittleTraffic},
		admin.Sized{Name: "catalog", Suggestion: sizing.Suggestion{Window: time.Minute, Requests: 6000, Throughput: 100,
			MeanHold: 50 * time.Millisecond, Little: 5, Peak: 6, P99: 5, Headroom: 0.25,
			Current: bulkhead.Settings{MaxConcurrent: 10, MaxQueue: 20}, MaxConcurrent: 7, MaxQueue: 14}},
	)
	r := e.ctl(t, "suggest", "--window", "1m")
	if r.code != 0 {
		t.Fatalf("suggest: %+v", r)
	}
	for _, want := range []string{
		"catalog   7 (now 10)      14 (now 20)  6000      100.0         50ms       5.0     6     5",
		"auth      1 (kept)        0 (kept)     12        -",
		"too little traffic",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("suggest output lacks %q:\n%s", want, r.stdout)
		}
	}
	// The footer says the headroom the daemon used, not the one asked for
	// (0 reads as unset, the default).
	if r := e.ctl(t, "suggest", "--headroom", "0"); r.code != 0 || !strings.Contains(r.stdout, "headroom 0.25;") {
		t.Errorf("suggest --headroom 0: %+v", r)
	}
	if r := e.ctl(t, "suggest", "catalog"); r.code != 0 || strings.Contains(r.stdout, "auth") {
		t.Errorf("suggest catalog: %+v", r)
	}
	if r := e.ctl(t, "suggest", "--window", "1h"); r.code == 0 || !strings.Contains(r.stderr, "window") {
		t.Errorf("a window past the history: %+v", r)
	}
}
