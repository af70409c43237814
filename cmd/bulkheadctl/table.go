package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// frame is one reading of every bulkhead, at the server's time.
type frame struct {
	at        time.Time
	bulkheads []*adminv1.Bulkhead
}

func frameOf(m *adminv1.WatchBulkheadsResponse) frame {
	return frame{at: m.GetTime().AsTime(), bulkheads: m.GetBulkheads()}
}

// writeTable prints the status table of cur; rates come from the counters'
// growth since prev (a dash without prev, or when a counter went back, as
// after a restart).
func writeTable(w io.Writer, cur frame, prev *frame) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BULKHEAD\tKIND\tLIMIT\tACTIVE\tQUEUED\tADMITTED/S\tREJECTED/S\tFAILURES/S\tSOURCE")
	before := map[string]*adminv1.Bulkhead{}
	var dt float64
	if prev != nil {
		dt = cur.at.Sub(prev.at).Seconds()
		for _, b := range prev.bulkheads {
			before[b.GetName()] = b
		}
	}
	for _, b := range cur.bulkheads {
		p := before[b.GetName()]
		rate := func(get func(*adminv1.Bulkhead) (uint64, bool)) string {
			if p == nil || dt <= 0 {
				return "-"
			}
			now, ok1 := get(b)
			then, ok2 := get(p)
			if !ok1 || !ok2 || now < then {
				return "-"
			}
			return strconv.FormatFloat(float64(now-then)/dt, 'f', 1, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n",
			b.GetName(), admin.KindOf(b), b.GetSettings().GetMaxConcurrent(), b.GetInUse(), queued(b),
			rate(admitted), rate(rejected), rate(failures), source(b))
	}
	return tw.Flush()
}

func queued(b *adminv1.Bulkhead) uint64 {
	q := b.GetQueued()
	return q.GetCritical() + q.GetNormal() + q.GetBestEffort()
}

func admitted(b *adminv1.Bulkhead) (uint64, bool) {
	a := b.GetCounters().GetAdmitted()
	return a.GetCritical() + a.GetNormal() + a.GetBestEffort(), true
}

func rejected(b *adminv1.Bulkhead) (uint64, bool) {
	r := b.GetCounters().GetRejected()
	return r.GetQueueFull() + r.GetShed() + r.GetTimeout() + r.GetUnknownBulkhead() + r.GetCircuitOpen(), true
}

func failures(b *adminv1.Bulkhead) (uint64, bool) {
	if b.GetOutcomes() == nil {
		return 0, false
	}
	return b.GetOutcomes().GetFailure(), true
}

func source(b *adminv1.Bulkhead) string {
	switch {
	case b.GetClosed():
		return "removed"
	case b.GetOverride() != nil:
		return "override"
	}
	return "file"
}
