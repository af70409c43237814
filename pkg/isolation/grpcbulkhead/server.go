package grpcbulkhead

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/isolation"
)

// UnaryServerInterceptor guards each unary method with the bulkhead that
// key names for its full method name ("/pkg.Service/Method"; "" leaves the
// method unguarded), taken from lims.
func UnaryServerInterceptor(lims Limiters, key func(fullMethod string) string, opts ...Option) grpc.UnaryServerInterceptor {
	o := buildOptions(opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		lim, err := o.lookup(lims, key(info.FullMethod))
		if err != nil {
			setReasonTrailer(ctx, nil, err)
			return nil, err
		}
		if lim == nil {
			return handler(ctx, req)
		}
		g, err := o.acquire(ctx, lim, o.incomingPriority(ctx))
		if err != nil {
			setReasonTrailer(ctx, nil, err)
			return nil, err
		}
		returned := false
		defer func() { g.end(!returned || serverFault(err)) }()
		resp, err = handler(ctx, req)
		returned = true
		return resp, err
	}
}

// StreamServerInterceptor guards each streaming method like
// UnaryServerInterceptor; the permit is held until the handler returns.
func StreamServerInterceptor(lims Limiters, key func(fullMethod string) string, opts ...Option) grpc.StreamServerInterceptor {
	o := buildOptions(opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		lim, err := o.lookup(lims, key(info.FullMethod))
		if err != nil {
			setReasonTrailer(ss.Context(), ss, err)
			return err
		}
		if lim == nil {
			return handler(srv, ss)
		}
		g, err := o.acquire(ss.Context(), lim, o.incomingPriority(ss.Context()))
		if err != nil {
			setReasonTrailer(ss.Context(), ss, err)
			return err
		}
		returned := false
		defer func() { g.end(!returned || serverFault(err)) }()
		err = handler(srv, ss)
		returned = true
		return err
	}
}

// lookup returns key's limiter; nil and no error for an unguarded call, nil
// and a rejection for an unknown key.
func (o *options) lookup(lims Limiters, key string) (*bulkhead.Limiter, error) {
	if key == "" {
		return nil, nil
	}
	if lim := lims.Get(key); lim != nil {
		return lim, nil
	}
	if o.allowUnknown {
		return nil, nil
	}
	return nil, &RejectedError{Bulkhead: key, Err: ErrUnknownBulkhead, RetryAfter: o.retryAfter}
}

// guard is a permit held by one call or stream.
type guard struct {
	permit  bulkhead.Permit
	name    string
	obs     isolation.Observer
	granted time.Time
	ended   atomic.Bool
}

// acquire takes a permit from lim, waiting at most until the call's
// deadline less the margin. Its errors are gRPC errors.
func (o *options) acquire(ctx context.Context, lim *bulkhead.Limiter, prio bulkhead.Priority) (*guard, error) {
	var start time.Time
	if o.observer != nil {
		start = time.Now()
	}
	var permit bulkhead.Permit
	var err error
	if dl, ok := ctx.Deadline(); ok && o.margin > 0 {
		permit, err = lim.AcquireBefore(ctx, prio, dl.Add(-o.margin))
	} else {
		permit, err = lim.Acquire(ctx, prio)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, status.FromContextError(err).Err()
		}
		return nil, &RejectedError{Bulkhead: lim.Name(), Err: err, RetryAfter: o.retryAfter}
	}
	g := &guard{permit: permit, name: lim.Name(), obs: o.observer}
	if g.obs != nil {
		g.granted = time.Now()
		g.obs.Admitted(g.name, g.granted.Sub(start))
	}
	return g, nil
}

// end releases the permit once and reports the outcome.
func (g *guard) end(failed bool) {
	if !g.ended.CompareAndSwap(false, true) {
		return
	}
	g.permit.Release()
	if g.obs != nil {
		g.obs.Finished(g.name, time.Since(g.granted), failed)
	}
}

// setReasonTrailer adds x-bulkhead-reason to the trailer of a rejected call.
func setReasonTrailer(ctx context.Context, ss grpc.ServerStream, err error) {
	r := ReasonOf(err)
	if r == bulkhead.ReasonNone {
		return
	}
	md := metadata.Pairs(isolation.ReasonHeader, r.String())
	if ss != nil {
		ss.SetTrailer(md)
		return
	}
	_ = grpc.SetTrailer(ctx, md) // fails only outside a server call
}
