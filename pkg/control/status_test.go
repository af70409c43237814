package control

import (
	"log/slog"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
)

type globalCounts map[string]admission.Global

func (g globalCounts) Global(name string) (admission.Global, bool) {
	v, ok := g[name]
	return v, ok
}

// A status carries the outcomes its source counted, and every replica's
// permits and waiters where the global source knows them.
func TestStatusSources(t *testing.T) {
	obs := sizing.New(clock.NewFake(time.Unix(1000, 0)))
	obs.Ended("catalog", bulkhead.Success, time.Millisecond)
	obs.Ended("catalog", bulkhead.Failure, time.Millisecond)
	obs.Ended("catalog", bulkhead.Failure, time.Millisecond)
	global := globalCounts{"catalog": {InUse: 4, Queued: [3]int{0, 2, 1}}}
	c := New(bulkhead.NewRegistry(), &policyRecorder{}, slog.New(slog.DiscardHandler),
		WithOutcomes(obs), WithGlobal(global))
	if _, err := c.Reload(parse(t, base)); err != nil {
		t.Fatal(err)
	}
	st, err := c.Get("catalog")
	if err != nil {
		t.Fatal(err)
	}
	if o := st.Outcomes; o == nil || *o != (Outcomes{Success: 1, Failure: 2}) {
		t.Errorf("catalog outcomes = %+v, want 1 success, 2 failures", o)
	}
	if st.Snapshot.InUse != 4 || st.Snapshot.Queued[bulkhead.Normal] != 2 || st.Snapshot.Queued[bulkhead.BestEffort] != 1 {
		t.Errorf("catalog in use %d, queued %v; want the global 4 and [0 2 1]", st.Snapshot.InUse, st.Snapshot.Queued)
	}
	st, err = c.Get("auth")
	if err != nil {
		t.Fatal(err)
	}
	if o := st.Outcomes; o == nil || *o != (Outcomes{}) {
		t.Errorf("auth outcomes = %+v, want zeros", o)
	}
}
