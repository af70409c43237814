package grpcbulkhead

import (
	"errors"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// ErrorDomain is the domain of the errdetails.ErrorInfo of rejections.
const ErrorDomain = "bulkhead"

// RejectedError is a bulkhead rejection as a gRPC error: GRPCStatus gives
// RESOURCE_EXHAUSTED with ErrorInfo and RetryInfo details, and Unwrap the
// bulkhead's sentinel (bulkhead.ErrQueueFull, ErrShed, ErrTimeout,
// ErrClosed, or ErrUnknownBulkhead).
type RejectedError struct {
	Bulkhead   string
	Err        error
	RetryAfter time.Duration
}

// ErrUnknownBulkhead means that the method's key names no bulkhead. Its reason is
// unknown_bulkhead.
var ErrUnknownBulkhead = errors.New("grpcbulkhead: no such bulkhead")

func (e *RejectedError) reason() bulkhead.Reason {
	if errors.Is(e.Err, ErrUnknownBulkhead) {
		return bulkhead.ReasonUnknownBulkhead
	}
	return bulkhead.ReasonOf(e.Err)
}

func (e *RejectedError) Error() string {
	return "bulkhead " + e.Bulkhead + " rejected the call: " + e.reason().String()
}

func (e *RejectedError) Unwrap() error { return e.Err }

// GRPCStatus returns RESOURCE_EXHAUSTED with the rejection's details.
func (e *RejectedError) GRPCStatus() *status.Status {
	r := e.reason().String()
	st := status.New(codes.ResourceExhausted, e.Error())
	if d, err := st.WithDetails(
		&errdetails.ErrorInfo{Domain: ErrorDomain, Reason: strings.ToUpper(r),
			Metadata: map[string]string{"bulkhead": e.Bulkhead, "reason": r}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)},
	); err == nil {
		st = d
	}
	return st
}

// ReasonOf returns the reason of a bulkhead rejection: a local one
// (*RejectedError, or a bulkhead sentinel) or a remote one (a status
// carrying this package's ErrorInfo); ReasonNone for anything else.
func ReasonOf(err error) bulkhead.Reason {
	if err == nil {
		return bulkhead.ReasonNone
	}
	if re, ok := errors.AsType[*RejectedError](err); ok {
		return re.reason()
	}
	if r := bulkhead.ReasonOf(err); r != bulkhead.ReasonNone {
		return r
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return bulkhead.ReasonNone
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			for _, r := range bulkhead.Reasons() {
				if r.String() == info.GetMetadata()["reason"] {
					return r
				}
			}
		}
	}
	return bulkhead.ReasonNone
}

// serverFault reports whether code is one HTTP maps to 5xx.
func serverFault(err error) bool {
	switch status.Code(err) {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}
