package accesslog

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

type call struct {
	dep string
	o   bulkhead.Outcome
}

type fakeCalls struct {
	mu    sync.Mutex
	ended []call
}

func (c *fakeCalls) Ended(dep string, o bulkhead.Outcome, held time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if held >= 0 {
		c.ended = append(c.ended, call{dep, o})
	}
}

// TestCallsSeeReleases: every request an end entry releases is told to
// Calls, once, with its outcome; a duplicate end entry is not.
func TestCallsSeeReleases(t *testing.T) {
	calls := &fakeCalls{}
	e := newEnv(t, WithCalls(calls))
	ok, failed := e.grant(t), e.grant(t)
	bad := endOf(failed)
	bad.Response.ResponseCode.Value = 503
	e.send(t, httpLogs(ident("n1"), endOf(ok), bad, endOf(ok)))
	calls.mu.Lock()
	defer calls.mu.Unlock()
	if want := []call{{"catalog", bulkhead.Success}, {"catalog", bulkhead.Failure}}; !slices.Equal(calls.ended, want) {
		t.Fatalf("Calls saw %v, want catalog success, catalog failure", calls.ended)
	}
}
