package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// patchJSON is the body of PATCH /v1/bulkheads/NAME. Absent (or null)
// fields stay as they are.
type patchJSON struct {
	MaxConcurrent   *int64   `json:"max_concurrent"`
	MaxQueue        *int64   `json:"max_queue"`
	MaxWait         *string  `json:"max_wait"` // a Go duration: "500ms"
	ReserveCritical *float64 `json:"reserve_critical"`
	ReserveNormal   *float64 `json:"reserve_normal"`
}

type unsupportedMediaError struct{ got string }

func (e *unsupportedMediaError) Error() string {
	return fmt.Sprintf("content-type %q: send application/json", e.got)
}

// decodePatch reads r's body (at most maxBody bytes; unknown fields and
// trailing data refused) into an update request without a name.
func decodePatch(w http.ResponseWriter, r *http.Request) (*adminv1.UpdateBulkheadRequest, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return nil, &unsupportedMediaError{ct}
		}
	}
	return parsePatch(http.MaxBytesReader(w, r.Body, maxBody))
}

// parsePatch decodes one JSON object from body. Every error is a
// MaxBytesError or an *invalidError naming the field where it can.
func parsePatch(body io.Reader) (*adminv1.UpdateBulkheadRequest, error) {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	var p patchJSON
	if err := dec.Decode(&p); err != nil {
		return nil, jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, err
		}
		inv := &invalidError{}
		inv.add("", "body: want one JSON object and nothing after it")
		return nil, inv
	}
	inv := &invalidError{}
	req := &adminv1.UpdateBulkheadRequest{}
	req.MaxConcurrent = int32Field(inv, "max_concurrent", p.MaxConcurrent)
	req.MaxQueue = int32Field(inv, "max_queue", p.MaxQueue)
	if p.MaxWait != nil {
		if d, err := parseDuration("max_wait", *p.MaxWait); err != nil {
			var fe *invalidError
			errors.As(err, &fe)
			inv.violations = append(inv.violations, fe.violations...)
		} else {
			req.MaxWait = durationpb.New(d)
		}
	}
	if p.ReserveCritical != nil {
		req.ReserveCritical = proto.Float64(*p.ReserveCritical)
	}
	if p.ReserveNormal != nil {
		req.ReserveNormal = proto.Float64(*p.ReserveNormal)
	}
	return req, inv.err()
}

func int32Field(inv *invalidError, field string, v *int64) *int32 {
	switch {
	case v == nil:
		return nil
	case *v > math.MaxInt32:
		inv.add(field, fmt.Sprintf("must be at most %d, got %d", math.MaxInt32, *v))
		return nil
	case *v < math.MinInt32:
		inv.add(field, fmt.Sprintf("must not be negative, got %d", *v))
		return nil
	}
	return proto.Int32(int32(*v))
}

// parseDuration parses a Go duration string for field.
func parseDuration(field, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		inv := &invalidError{}
		inv.add(field, fmt.Sprintf("want a duration such as \"500ms\" or \"2s\", got %q", s))
		return 0, inv
	}
	return d, nil
}

// jsonError turns a decoding error into a clean violation.
func jsonError(err error) error {
	var (
		tooBig    *http.MaxBytesError
		typeErr   *json.UnmarshalTypeError
		syntaxErr *json.SyntaxError
	)
	inv := &invalidError{}
	switch {
	case errors.As(err, &tooBig):
		return err
	case errors.Is(err, io.EOF):
		inv.add("", "body: empty; send a JSON object with the fields to change")
	case errors.As(err, &typeErr) && typeErr.Field != "":
		inv.add(typeErr.Field, "want "+jsonKind(typeErr.Type.Kind().String())+", got JSON "+typeErr.Value)
	case errors.As(err, &typeErr):
		inv.add("", "body: want a JSON object, got JSON "+typeErr.Value)
	case errors.As(err, &syntaxErr):
		inv.add("", fmt.Sprintf("body: invalid JSON at byte %d: %s", syntaxErr.Offset, syntaxErr.Error()))
	case errors.Is(err, io.ErrUnexpectedEOF):
		inv.add("", "body: truncated JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		inv.add(name, "unknown field (want max_concurrent, max_queue, max_wait, reserve_critical, reserve_normal)")
	default:
		inv.add("", "body: "+err.Error())
	}
	return inv
}

func jsonKind(k string) string {
	switch k {
	case "int64", "int32", "int":
		return "an integer"
	case "float64":
		return "a number"
	case "string":
		return "a string such as \"500ms\""
	case "struct":
		return "a JSON object"
	}
	return k
}
