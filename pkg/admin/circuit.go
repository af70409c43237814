package admin

import (
	"context"
	"encoding/json"
	"net/http"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/control"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// ErrNoBreaker is wrapped by SetCircuit's error for a bulkhead without a
// circuit breaker (FAILED_PRECONDITION).
var ErrNoBreaker = control.ErrNoBreaker

// circuitToProto converts a breaker snapshot to its API message.
func circuitToProto(c *breaker.Snapshot) *adminv1.Circuit {
	if c == nil {
		return nil
	}
	return &adminv1.Circuit{State: c.State.String(), Mode: c.Mode.String(), Since: timestamppb.New(c.Since),
		WindowCalls: c.Calls, WindowFailed: c.Failed, Refused: c.Refused, Opened: c.Transitions[breaker.Open]}
}

func (v *service) SetCircuit(ctx context.Context, r *adminv1.SetCircuitRequest) (*adminv1.SetCircuitResponse, error) {
	if err := requireName(r.GetName()); err != nil {
		return nil, err
	}
	m, err := breaker.ParseMode(r.GetMode())
	if err != nil {
		inv := &invalidError{}
		inv.add("mode", err.Error())
		return nil, inv
	}
	st, err := v.s.ctl.SetCircuit(r.GetName(), m, actor(ctx))
	if err != nil {
		return nil, err
	}
	return &adminv1.SetCircuitResponse{Bulkhead: toProto(st)}, nil
}

// CircuitView is a bulkhead's circuit breaker in JSON.
type CircuitView struct {
	State        string `json:"state" yaml:"state"`
	Mode         string `json:"mode" yaml:"mode"`
	Since        string `json:"since" yaml:"since"`
	WindowCalls  uint64 `json:"window_calls" yaml:"window_calls"`
	WindowFailed uint64 `json:"window_failed" yaml:"window_failed"`
	Refused      uint64 `json:"refused" yaml:"refused"`
	Opened       uint64 `json:"opened" yaml:"opened"`
}

func newCircuitView(c *adminv1.Circuit) *CircuitView {
	if c == nil {
		return nil
	}
	return &CircuitView{State: c.GetState(), Mode: c.GetMode(), Since: c.GetSince().AsTime().UTC().Format("2006-01-02T15:04:05.000Z"),
		WindowCalls: c.GetWindowCalls(), WindowFailed: c.GetWindowFailed(), Refused: c.GetRefused(), Opened: c.GetOpened()}
}

// circuitJSON is the body of POST /v1/bulkheads/NAME:circuit.
type circuitJSON struct {
	Mode string `json:"mode"`
}

// setCircuit answers POST /v1/bulkheads/NAME:circuit {"mode": MODE}.
func (s *Server) setCircuit(w http.ResponseWriter, r *http.Request, name string) {
	var body circuitJSON
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		inv := &invalidError{}
		inv.add("body", `must be {"mode": "auto" | "force_open" | "force_closed"}: `+err.Error())
		s.writeError(w, r, inv)
		return
	}
	resp, err := s.svc.SetCircuit(r.Context(), &adminv1.SetCircuitRequest{Name: name, Mode: body.Mode})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, itemJSON{Bulkhead: NewView(resp.GetBulkhead())})
}
