package control

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
)

func TestSuggest(t *testing.T) {
	fc := clock.NewFake(time.Unix(1000, 0))
	obs := sizing.New(fc)
	var logs bytes.Buffer
	c := New(bulkhead.NewRegistry(), &policyRecorder{}, slog.New(slog.NewTextHandler(&logs, nil)), WithSizing(obs))
	if _, err := c.Reload(parse(t, base)); err != nil {
		t.Fatal(err)
	}
	for range 200 {
		obs.Ended("catalog", bulkhead.Success, 50*time.Millisecond)
	}
	obs.Sample("catalog", 9, 9)
	all, err := c.Suggest("", sizing.Params{Window: time.Minute})
	if err != nil || len(all) != 2 || all[0].Name != "auth" || all[1].Name != "catalog" {
		t.Fatalf("Suggest all: %+v %v", all, err)
	}
	if !errors.Is(all[0].Refused, sizing.ErrTooLittleTraffic) || all[1].Refused != nil {
		t.Fatalf("refusals: auth %v, catalog %v", all[0].Refused, all[1].Refused)
	}
	// 200 in one second holding 50 ms: Little says 10; 9 in use.
	if s := all[1].Suggestion; s.MaxConcurrent != 13 || s.Current.MaxConcurrent != 10 {
		t.Fatalf("catalog: %+v", s)
	}
	if _, err := c.Suggest("nope", sizing.Params{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	if _, err := c.Suggest("", sizing.Params{Window: time.Hour}); !errors.Is(err, sizing.ErrInvalidParams) {
		t.Fatalf("bad params: %v", err)
	}
}
