package admin

import (
	"context"
	"errors"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// Leases tells who holds a bulkhead's permits; *permit.Memory satisfies
// it. Holders must be safe for concurrent use and must not keep the slice
// it returns.
type Leases interface {
	// Holders returns up to max of bulkhead's live leases, oldest first,
	// and how many live leases bulkhead has.
	Holders(bulkhead string, max int) ([]permit.Lease, int)
}

var _ Leases = (*permit.Memory)(nil)

// WithLeases sets where ListHolders reads a bulkhead's holders. Without it
// ListHolders answers UNIMPLEMENTED.
func WithLeases(l Leases) Option { return func(s *Server) { s.leases = l } }

// The bounds of ListHolders' limit.
const (
	// DefaultHolders is the limit of a request that sets none (0).
	DefaultHolders = 100
	// MaxHolders is the largest limit a request may set.
	MaxHolders = 1000
)

var errNoLeases = errors.New("this server does not list the holders of permits")

// holdersLimit validates a requested limit: 0 means DefaultHolders.
func holdersLimit(n int64) (int, error) {
	if n < 0 || n > MaxHolders {
		inv := &invalidError{}
		inv.add("limit", "must be within [0, "+strconv.Itoa(MaxHolders)+"] (0: "+strconv.Itoa(DefaultHolders)+"), got "+strconv.FormatInt(n, 10))
		return 0, inv
	}
	if n == 0 {
		return DefaultHolders, nil
	}
	return int(n), nil
}

func (v *service) ListHolders(_ context.Context, r *adminv1.ListHoldersRequest) (*adminv1.ListHoldersResponse, error) {
	if err := requireName(r.GetName()); err != nil {
		return nil, err
	}
	limit, err := holdersLimit(int64(r.GetLimit()))
	if err != nil {
		return nil, err
	}
	if v.s.leases == nil {
		return nil, errNoLeases
	}
	if _, err := v.s.ctl.Get(r.GetName()); err != nil {
		return nil, err
	}
	ls, total := v.s.leases.Holders(r.GetName(), limit)
	now := v.s.clock.Now() // after the read: no lease is younger than now
	resp := &adminv1.ListHoldersResponse{
		Time:    timestamppb.New(now),
		Total:   int64(total),
		Holders: make([]*adminv1.Holder, 0, min(len(ls), limit)),
	}
	for _, l := range ls[:min(len(ls), limit)] {
		resp.Holders = append(resp.Holders, holderToProto(l, now))
	}
	return resp, nil
}

// holderToProto converts a lease to its API message, leaving out its
// token: a capability that releases the permit.
func holderToProto(l permit.Lease, now time.Time) *adminv1.Holder {
	h := &adminv1.Holder{
		Node:     l.Node,
		Source:   adminv1.Holder_SOURCE_GRANTED,
		Acquired: timestamppb.New(l.Acquired),
		Expires:  timestamppb.New(l.Expires),
		Age:      durationpb.New(max(now.Sub(l.Acquired), 0)),
	}
	switch {
	case l.Adopted:
		h.Source = adminv1.Holder_SOURCE_ADOPTED // the class is unknown
	case l.Priority == bulkhead.Critical:
		h.Priority = adminv1.Priority_PRIORITY_CRITICAL
	case l.Priority == bulkhead.Normal:
		h.Priority = adminv1.Priority_PRIORITY_NORMAL
	case l.Priority == bulkhead.BestEffort:
		h.Priority = adminv1.Priority_PRIORITY_BEST_EFFORT
	}
	if !l.Renewed.IsZero() {
		h.Renewed = timestamppb.New(l.Renewed)
	}
	return h
}

// HoldersView is a bulkhead's holders as the JSON API (and bulkheadctl
// holders -o json|yaml) shows them. Tokens are never part of it.
type HoldersView struct {
	Bulkhead string       `json:"bulkhead" yaml:"bulkhead"`
	Time     time.Time    `json:"time" yaml:"time"`
	Total    int64        `json:"total" yaml:"total"`
	Holders  []HolderView `json:"holders" yaml:"holders"`
}

// HolderView is one permit's lease.
type HolderView struct {
	Node string `json:"node" yaml:"node"`
	// critical, normal, best_effort, or unknown (adopted permits).
	Priority string `json:"priority" yaml:"priority"`
	// granted or adopted.
	Source   string    `json:"source" yaml:"source"`
	Acquired time.Time `json:"acquired" yaml:"acquired"`
	// Renewed is null when the lease was never renewed.
	Renewed *time.Time `json:"renewed" yaml:"renewed"`
	Expires time.Time  `json:"expires" yaml:"expires"`
	// Age is a Go duration ("1.5s") at Time.
	Age string `json:"age" yaml:"age"`
}

// NewHoldersView converts ListHolders' answer for bulkhead name to its
// JSON form. It is nil-safe.
func NewHoldersView(name string, r *adminv1.ListHoldersResponse) HoldersView {
	v := HoldersView{Bulkhead: name, Time: r.GetTime().AsTime(), Total: r.GetTotal(), Holders: make([]HolderView, 0, len(r.GetHolders()))}
	for _, h := range r.GetHolders() {
		hv := HolderView{
			Node:     h.GetNode(),
			Priority: priorityName(h.GetPriority()),
			Source:   sourceName(h.GetSource()),
			Acquired: h.GetAcquired().AsTime(),
			Expires:  h.GetExpires().AsTime(),
			Age:      h.GetAge().AsDuration().String(),
		}
		if h.GetRenewed() != nil {
			t := h.GetRenewed().AsTime()
			hv.Renewed = &t
		}
		v.Holders = append(v.Holders, hv)
	}
	return v
}

// priorityName is p's configuration name, or "unknown".
func priorityName(p adminv1.Priority) string {
	switch p {
	case adminv1.Priority_PRIORITY_CRITICAL:
		return bulkhead.Critical.String()
	case adminv1.Priority_PRIORITY_NORMAL:
		return bulkhead.Normal.String()
	case adminv1.Priority_PRIORITY_BEST_EFFORT:
		return bulkhead.BestEffort.String()
	}
	return "unknown"
}

// sourceName is "granted", "adopted" or "unknown".
func sourceName(s adminv1.Holder_Source) string {
	switch s {
	case adminv1.Holder_SOURCE_GRANTED:
		return "granted"
	case adminv1.Holder_SOURCE_ADOPTED:
		return "adopted"
	}
	return "unknown"
}
