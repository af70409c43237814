package admin

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

var (
	errStopping        = errors.New("the admin server is shutting down")
	errTooManyWatchers = errors.New("too many watch streams open")
)

// violation is one problem with a request, naming its API field ("" when
// the problem is with the request as a whole).
type violation struct{ field, desc string }

// invalidError is a bad request: INVALID_ARGUMENT, HTTP 400.
type invalidError struct{ violations []violation }

func (e *invalidError) add(field, desc string) {
	e.violations = append(e.violations, violation{field, desc})
}

// err returns e as an error, or nil when it holds no violation.
func (e *invalidError) err() error {
	if len(e.violations) == 0 {
		return nil
	}
	return e
}

func (e *invalidError) Error() string {
	parts := make([]string, len(e.violations))
	for i, v := range e.violations {
		if v.field == "" {
			parts[i] = v.desc
		} else {
			parts[i] = v.field + ": " + v.desc
		}
	}
	return strings.Join(parts, "; ")
}

// settingFields maps the field names in bulkhead.Settings.Validate's
// messages to API field names. With the ": " that follows, no name is a
// prefix of another.
var settingFields = []struct{ conf, api string }{
	{"max_concurrent", "max_concurrent"},
	{"max_queue", "max_queue"},
	{"max_wait", "max_wait"},
	{"reserve.critical", "reserve_critical"},
	{"reserve.normal", "reserve_normal"},
	{"reserve", "reserve"}, // the two reserves together
}

// invalidSettings turns a Controller error wrapping
// bulkhead.ErrInvalidSettings into violations: one per line of the
// message, each naming the field the line starts with.
func invalidSettings(err error) *invalidError {
	inv := &invalidError{}
	for _, line := range strings.Split(err.Error(), "\n") {
		at, field := -1, ""
		for _, f := range settingFields {
			i := strings.Index(line, f.conf+": ")
			if i >= 0 && (at < 0 || i < at) {
				at, field = i, f.api
			}
		}
		if at < 0 {
			if s := strings.TrimSpace(line); s != "" {
				inv.add("", s)
			}
			continue
		}
		desc := line[at:]
		_, desc, _ = strings.Cut(desc, ": ")
		inv.add(field, desc)
	}
	if len(inv.violations) == 0 {
		inv.add("", err.Error())
	}
	return inv
}

// toStatus translates an error of this package or of the Controller into
// a gRPC status error.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var inv *invalidError
	switch {
	case errors.As(err, &inv):
	case errors.Is(err, bulkhead.ErrInvalidSettings):
		inv = invalidSettings(err)
	case errors.Is(err, ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ErrNoBreaker):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, err.Error())
	case errors.Is(err, ErrPermissionDenied):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, errTooManyWatchers):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, errStopping):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, ErrNoSizing):
		return status.Error(codes.Unimplemented, err.Error())
	case errors.Is(err, errNoLeases):
		return status.Error(codes.Unimplemented, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default:
		return status.Error(codes.Internal, err.Error())
	}
	br := &errdetails.BadRequest{}
	for _, v := range inv.violations {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.field, Description: v.desc})
	}
	st, derr := status.New(codes.InvalidArgument, inv.Error()).WithDetails(br)
	if derr != nil {
		return status.Error(codes.InvalidArgument, inv.Error())
	}
	return st.Err()
}

// fieldViolations returns the BadRequest field violations of st.
func fieldViolations(st *status.Status) []*errdetails.BadRequest_FieldViolation {
	var out []*errdetails.BadRequest_FieldViolation
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			out = append(out, br.GetFieldViolations()...)
		}
	}
	return out
}

// httpStatus maps a gRPC code to the HTTP status of the JSON API.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.FailedPrecondition:
		return http.StatusConflict
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.Canceled:
		return 499 // client closed request
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Unimplemented:
		return http.StatusNotImplemented
	default:
		return http.StatusInternalServerError
	}
}
