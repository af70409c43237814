package admin

import (
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// toProto converts a Status to its API message.
func toProto(s Status) *adminv1.Bulkhead {
	snap := s.Snapshot
	b := &adminv1.Bulkhead{
		Name:         snap.Name,
		Settings:     settingsToProto(snap.Settings),
		FileSettings: settingsToProto(s.FileSettings),
		Closed:       snap.Closed,
		InUse:        int64(snap.InUse),
		Queued: &adminv1.PriorityCounts{
			Critical:   uint64(max(snap.Queued[bulkhead.Critical], 0)),
			Normal:     uint64(max(snap.Queued[bulkhead.Normal], 0)),
			BestEffort: uint64(max(snap.Queued[bulkhead.BestEffort], 0)),
		},
		Counters: &adminv1.Counters{
			Admitted: &adminv1.PriorityCounts{
				Critical:   snap.Admitted[bulkhead.Critical],
				Normal:     snap.Admitted[bulkhead.Normal],
				BestEffort: snap.Admitted[bulkhead.BestEffort],
			},
			Rejected: &adminv1.RejectedCounts{
				QueueFull:         snap.Rejected[bulkhead.ReasonQueueFull],
				Shed:              snap.Rejected[bulkhead.ReasonShed],
				Timeout:           snap.Rejected[bulkhead.ReasonTimeout],
				UnknownBulkhead:   snap.Rejected[bulkhead.ReasonUnknownBulkhead],
				CircuitOpen:       snap.Rejected[bulkhead.ReasonCircuitOpen],
				LedgerUnavailable: snap.Rejected[bulkhead.ReasonLedgerUnavailable],
			},
			Cancelled:         snap.Cancelled,
			Released:          snap.Released,
			DuplicateReleases: snap.DuplicateReleases,
		},
		LeaseTtl: durationpb.New(s.LeaseTTL),
		Tenants:  int64(s.Tenants),
		Kind:     string(s.Kind),
	}
	if o := s.Override; o != nil {
		b.Override = &adminv1.Override{Settings: settingsToProto(o.Settings), Actor: o.Actor, Time: timestamppb.New(o.At)}
	}
	if o := s.Outcomes; o != nil {
		b.Outcomes = &adminv1.Outcomes{Success: o.Success, Failure: o.Failure, Aborted: o.Aborted}
	}
	b.Circuit = circuitToProto(s.Circuit)
	return b
}

func settingsToProto(s bulkhead.Settings) *adminv1.Settings {
	return &adminv1.Settings{
		MaxConcurrent:   clampInt32(s.MaxConcurrent),
		MaxQueue:        clampInt32(s.MaxQueue),
		MaxWait:         durationpb.New(s.MaxWait),
		ReserveCritical: s.ReserveCritical,
		ReserveNormal:   s.ReserveNormal,
	}
}

func clampInt32(n int) int32 {
	return int32(min(max(n, math.MinInt32), math.MaxInt32))
}

// patchFromProto validates the shape of an update request (the values are
// validated by the Controller, merged with the current settings).
func patchFromProto(r *adminv1.UpdateBulkheadRequest) (Patch, error) {
	var p Patch
	var inv invalidError
	if r.GetName() == "" {
		inv.add("name", "required")
	}
	if r.MaxConcurrent != nil {
		n := int(r.GetMaxConcurrent())
		p.MaxConcurrent = &n
	}
	if r.MaxQueue != nil {
		n := int(r.GetMaxQueue())
		p.MaxQueue = &n
	}
	if r.MaxWait != nil {
		if err := r.MaxWait.CheckValid(); err != nil {
			inv.add("max_wait", "not a valid duration")
		} else {
			d := r.MaxWait.AsDuration()
			p.MaxWait = &d
		}
	}
	if r.ReserveCritical != nil {
		f := r.GetReserveCritical()
		p.ReserveCritical = &f
	}
	if r.ReserveNormal != nil {
		f := r.GetReserveNormal()
		p.ReserveNormal = &f
	}
	if p.Empty() && r.MaxWait == nil {
		inv.add("", "nothing to change: set at least one of max_concurrent, max_queue, max_wait, reserve_critical, reserve_normal")
	}
	return p, inv.err()
}

// watchInterval bounds.
const (
	minWatchInterval     = 100 * time.Millisecond
	maxWatchInterval     = time.Minute
	defaultWatchInterval = time.Second
)

func watchInterval(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return defaultWatchInterval, nil
	}
	var inv invalidError
	if err := d.CheckValid(); err != nil {
		inv.add("interval", "not a valid duration")
		return 0, inv.err()
	}
	iv := d.AsDuration()
	if iv < minWatchInterval || iv > maxWatchInterval {
		inv.add("interval", "must be within ["+minWatchInterval.String()+", "+maxWatchInterval.String()+"], got "+iv.String())
		return 0, inv.err()
	}
	return iv, nil
}
