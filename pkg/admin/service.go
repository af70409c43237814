package admin

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// service implements AdminService over the Controller. Its methods return
// errors of this package or of the Controller; the interceptors (gRPC) and
// writeError (HTTP) translate them. The JSON API calls the same methods.
type service struct {
	adminv1.UnimplementedAdminServiceServer
	s *Server
}

var _ adminv1.AdminServiceServer = (*service)(nil)

func (v *service) ListBulkheads(context.Context, *adminv1.ListBulkheadsRequest) (*adminv1.ListBulkheadsResponse, error) {
	resp := &adminv1.ListBulkheadsResponse{Bulkheads: v.list()}
	if v.s.ledger != nil {
		li := v.s.ledger()
		resp.Ledger = &adminv1.Ledger{Backend: li.Backend, State: li.State, Replicas: int32(li.Replicas), OnUnavailable: li.OnUnavailable,
			CapacityLeases: li.CapacityLeases}
	}
	return resp, nil
}

func (v *service) list() []*adminv1.Bulkhead {
	sts := v.s.ctl.List()
	out := make([]*adminv1.Bulkhead, len(sts))
	for i, st := range sts {
		out[i] = toProto(st)
	}
	return out
}

func (v *service) GetBulkhead(_ context.Context, r *adminv1.GetBulkheadRequest) (*adminv1.GetBulkheadResponse, error) {
	if err := requireName(r.GetName()); err != nil {
		return nil, err
	}
	st, err := v.s.ctl.Get(r.GetName())
	if err != nil {
		return nil, err
	}
	return &adminv1.GetBulkheadResponse{Bulkhead: toProto(st)}, nil
}

func (v *service) UpdateBulkhead(ctx context.Context, r *adminv1.UpdateBulkheadRequest) (*adminv1.UpdateBulkheadResponse, error) {
	p, err := patchFromProto(r)
	if err != nil {
		return nil, err
	}
	prev, err := v.s.ctl.Get(r.GetName())
	if err != nil {
		return nil, err
	}
	st, err := v.s.ctl.Update(r.GetName(), p, actor(ctx))
	if err != nil {
		return nil, err
	}
	return &adminv1.UpdateBulkheadResponse{Bulkhead: toProto(st), Previous: toProto(prev)}, nil
}

func (v *service) ResetBulkhead(ctx context.Context, r *adminv1.ResetBulkheadRequest) (*adminv1.ResetBulkheadResponse, error) {
	if err := requireName(r.GetName()); err != nil {
		return nil, err
	}
	prev, err := v.s.ctl.Get(r.GetName())
	if err != nil {
		return nil, err
	}
	st, err := v.s.ctl.Reset(r.GetName(), actor(ctx))
	if err != nil {
		return nil, err
	}
	return &adminv1.ResetBulkheadResponse{Bulkhead: toProto(st), Previous: toProto(prev)}, nil
}

func (v *service) WatchBulkheads(r *adminv1.WatchBulkheadsRequest, stream grpc.ServerStreamingServer[adminv1.WatchBulkheadsResponse]) error {
	iv, err := watchInterval(r.GetInterval())
	if err != nil {
		return err
	}
	return v.watch(stream.Context(), iv, stream.Send)
}

// watch sends every bulkhead at once and then every interval, until ctx
// ends (its error), send fails (that error) or the server stops
// (errStopping). At most maxWatchers run at once (errTooManyWatchers).
func (v *service) watch(ctx context.Context, interval time.Duration, send func(*adminv1.WatchBulkheadsResponse) error) error {
	select {
	case v.s.watchers <- struct{}{}:
		defer func() { <-v.s.watchers }()
	default:
		return errTooManyWatchers
	}
	for {
		select {
		case <-v.s.stopping:
			return errStopping
		default:
		}
		resp := &adminv1.WatchBulkheadsResponse{Time: timestamppb.New(v.s.clock.Now()), Bulkheads: v.list()}
		if err := send(resp); err != nil {
			return err
		}
		t := v.s.clock.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-v.s.stopping:
			t.Stop()
			return errStopping
		case <-t.C():
		}
	}
}

func requireName(name string) error {
	if name == "" {
		inv := &invalidError{}
		inv.add("name", "required")
		return inv
	}
	return nil
}

// actor is the caller recorded with a change; the interceptors and the
// HTTP handler always set one.
func actor(ctx context.Context) string {
	if c, ok := callerFrom(ctx); ok {
		return c.String()
	}
	return "unknown"
}
