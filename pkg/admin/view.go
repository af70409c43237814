package admin

import (
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// View is a bulkhead as the JSON API (and bulkheadctl get -o json|yaml)
// shows it. Durations are Go duration strings ("500ms").
type View struct {
	Name         string        `json:"name" yaml:"name"`
	Settings     SettingsView  `json:"settings" yaml:"settings"`
	FileSettings SettingsView  `json:"file_settings" yaml:"file_settings"`
	Override     *OverrideView `json:"override" yaml:"override"`
	Closed       bool          `json:"closed" yaml:"closed"`
	InUse        int64         `json:"in_use" yaml:"in_use"`
	Queued       PriorityView  `json:"queued" yaml:"queued"`
	Counters     CountersView  `json:"counters" yaml:"counters"`
	Outcomes     *OutcomesView `json:"outcomes,omitempty" yaml:"outcomes,omitempty"`
	Circuit      *CircuitView  `json:"circuit,omitempty" yaml:"circuit,omitempty"`
	LeaseTTL     string        `json:"lease_ttl" yaml:"lease_ttl"`
	Tenants      int64         `json:"tenants" yaml:"tenants"`
	// Kind is what the bulkhead counts: requests or connections.
	Kind string `json:"kind" yaml:"kind"`
}

// SettingsView is Settings in the JSON API.
type SettingsView struct {
	MaxConcurrent   int32   `json:"max_concurrent" yaml:"max_concurrent"`
	MaxQueue        int32   `json:"max_queue" yaml:"max_queue"`
	MaxWait         string  `json:"max_wait" yaml:"max_wait"`
	ReserveCritical float64 `json:"reserve_critical" yaml:"reserve_critical"`
	ReserveNormal   float64 `json:"reserve_normal" yaml:"reserve_normal"`
}

// OverrideView is an Override in the JSON API.
type OverrideView struct {
	Settings SettingsView `json:"settings" yaml:"settings"`
	Actor    string       `json:"actor" yaml:"actor"`
	Time     time.Time    `json:"time" yaml:"time"`
}

// PriorityView holds one number per class.
type PriorityView struct {
	Critical   uint64 `json:"critical" yaml:"critical"`
	Normal     uint64 `json:"normal" yaml:"normal"`
	BestEffort uint64 `json:"best_effort" yaml:"best_effort"`
}

// RejectedView holds one counter per rejection reason.
type RejectedView struct {
	QueueFull       uint64 `json:"queue_full" yaml:"queue_full"`
	Shed            uint64 `json:"shed" yaml:"shed"`
	Timeout         uint64 `json:"timeout" yaml:"timeout"`
	UnknownBulkhead uint64 `json:"unknown_bulkhead" yaml:"unknown_bulkhead"`
	CircuitOpen     uint64 `json:"circuit_open" yaml:"circuit_open"`
	// LedgerUnavailable: the shared ledger did not answer (fail_closed).
	LedgerUnavailable uint64 `json:"ledger_unavailable" yaml:"ledger_unavailable"`
}

// LedgerView is the permit ledger in the JSON API: which backend serves,
// and with Redis its state at this replica.
type LedgerView struct {
	Backend       string `json:"backend" yaml:"backend"`
	State         string `json:"state" yaml:"state"`
	Replicas      int32  `json:"replicas" yaml:"replicas"`
	OnUnavailable string `json:"on_unavailable,omitempty" yaml:"on_unavailable,omitempty"`
	// CapacityLeases: with redis, each replica admits from a capacity lease
	// (ledger.redis.capacity_leases); false with memory or per request.
	CapacityLeases bool `json:"capacity_leases" yaml:"capacity_leases"`
}

// NewLedgerView converts l (nil gives nil).
func NewLedgerView(l *adminv1.Ledger) *LedgerView {
	if l == nil {
		return nil
	}
	return &LedgerView{Backend: l.GetBackend(), State: l.GetState(), Replicas: l.GetReplicas(), OnUnavailable: l.GetOnUnavailable(),
		CapacityLeases: l.GetCapacityLeases()}
}

// CountersView holds a bulkhead's counters.
type CountersView struct {
	Admitted          PriorityView `json:"admitted" yaml:"admitted"`
	Rejected          RejectedView `json:"rejected" yaml:"rejected"`
	Cancelled         uint64       `json:"cancelled" yaml:"cancelled"`
	Released          uint64       `json:"released" yaml:"released"`
	DuplicateReleases uint64       `json:"duplicate_releases" yaml:"duplicate_releases"`
}

// OutcomesView counts how admitted requests ended.
type OutcomesView struct {
	Success uint64 `json:"success" yaml:"success"`
	Failure uint64 `json:"failure" yaml:"failure"`
	Aborted uint64 `json:"aborted" yaml:"aborted"`
}

// NewView converts an API message to its JSON form. It is nil-safe.
func NewView(b *adminv1.Bulkhead) View {
	c := b.GetCounters()
	v := View{
		Name:         b.GetName(),
		Settings:     newSettingsView(b.GetSettings()),
		FileSettings: newSettingsView(b.GetFileSettings()),
		Closed:       b.GetClosed(),
		InUse:        b.GetInUse(),
		Queued:       newPriorityView(b.GetQueued()),
		Counters: CountersView{
			Admitted: newPriorityView(c.GetAdmitted()),
			Rejected: RejectedView{
				QueueFull:         c.GetRejected().GetQueueFull(),
				Shed:              c.GetRejected().GetShed(),
				Timeout:           c.GetRejected().GetTimeout(),
				UnknownBulkhead:   c.GetRejected().GetUnknownBulkhead(),
				CircuitOpen:       c.GetRejected().GetCircuitOpen(),
				LedgerUnavailable: c.GetRejected().GetLedgerUnavailable(),
			},
			Cancelled:         c.GetCancelled(),
			Released:          c.GetReleased(),
			DuplicateReleases: c.GetDuplicateReleases(),
		},
		LeaseTTL: b.GetLeaseTtl().AsDuration().String(),
		Tenants:  b.GetTenants(),
		Kind:     KindOf(b),
	}
	if o := b.GetOverride(); o != nil {
		v.Override = &OverrideView{Settings: newSettingsView(o.GetSettings()), Actor: o.GetActor(), Time: o.GetTime().AsTime()}
	}
	if o := b.GetOutcomes(); o != nil {
		v.Outcomes = &OutcomesView{Success: o.GetSuccess(), Failure: o.GetFailure(), Aborted: o.GetAborted()}
	}
	v.Circuit = newCircuitView(b.GetCircuit())
	return v
}

func newSettingsView(s *adminv1.Settings) SettingsView {
	return SettingsView{
		MaxConcurrent:   s.GetMaxConcurrent(),
		MaxQueue:        s.GetMaxQueue(),
		MaxWait:         s.GetMaxWait().AsDuration().String(),
		ReserveCritical: s.GetReserveCritical(),
		ReserveNormal:   s.GetReserveNormal(),
	}
}

func newPriorityView(p *adminv1.PriorityCounts) PriorityView {
	return PriorityView{Critical: p.GetCritical(), Normal: p.GetNormal(), BestEffort: p.GetBestEffort()}
}

// Views converts a list of API messages.
func Views(bs []*adminv1.Bulkhead) []View {
	out := make([]View, len(bs))
	for i, b := range bs {
		out[i] = NewView(b)
	}
	return out
}

// KindOf is what b counts (config.Kind); a server older than connection
// bulkheads reports no kind: its bulkheads count requests.
func KindOf(b *adminv1.Bulkhead) string {
	if k := b.GetKind(); k != "" {
		return k
	}
	return string(config.KindRequests)
}
