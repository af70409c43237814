package admin

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/control"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// ErrNoSizing is wrapped by Suggest's error when the server keeps no
// observations (UNIMPLEMENTED).
var ErrNoSizing = control.ErrNoSizing

func (v *service) SuggestBulkheads(_ context.Context, r *adminv1.SuggestBulkheadsRequest) (*adminv1.SuggestBulkheadsResponse, error) {
	p, err := sizingParams(r)
	if err != nil {
		return nil, err
	}
	sized, err := v.s.ctl.Suggest(r.GetName(), p)
	if err != nil {
		return nil, err
	}
	resp := &adminv1.SuggestBulkheadsResponse{}
	for _, s := range sized {
		resp.Suggestions = append(resp.Suggestions, suggestionToProto(s))
	}
	return resp, nil
}

// sizingParams checks a request's parameters; zero ones take the defaults
// (sizing.Params.Defaults).
func sizingParams(r *adminv1.SuggestBulkheadsRequest) (sizing.Params, error) {
	var inv invalidError
	p := sizing.Params{Headroom: r.GetHeadroom(), MinRequests: int(r.GetMinRequests())}
	if w := r.GetWindow(); w != nil {
		if err := w.CheckValid(); err != nil {
			inv.add("window", "not a valid duration")
			return p, inv.err()
		}
		p.Window = w.AsDuration()
	}
	err := p.Defaults().Validate()
	if err == nil {
		return p, nil
	}
	for _, leaf := range strings.Split(strings.TrimPrefix(err.Error(), sizing.ErrInvalidParams.Error()+": "), "\n") {
		field, desc, _ := strings.Cut(leaf, ": ")
		inv.add(field, desc)
	}
	return p, inv.err()
}

func suggestionToProto(s control.Sized) *adminv1.Suggestion {
	g := s.Suggestion
	out := &adminv1.Suggestion{Name: s.Name, Window: durationpb.New(g.Window), Requests: g.Requests,
		CurrentMaxConcurrent: clampInt32(g.Current.MaxConcurrent), CurrentMaxQueue: clampInt32(g.Current.MaxQueue),
		CurrentMaxWait: durationpb.New(g.Current.MaxWait), Headroom: g.Headroom}
	if s.Refused != nil {
		out.Refused = s.Refused.Error()
		return out
	}
	out.Throughput, out.MeanThroughput, out.MeanHold, out.Little = g.Throughput, g.MeanThroughput, durationpb.New(g.MeanHold), g.Little
	out.Peak, out.P99InUse = clampInt32(g.Peak), clampInt32(g.P99)
	out.MaxConcurrent, out.MaxQueue = clampInt32(g.MaxConcurrent), clampInt32(g.MaxQueue)
	return out
}

// SuggestionView is a recommendation in JSON.
type SuggestionView struct {
	Name                 string  `json:"name" yaml:"name"`
	Refused              string  `json:"refused,omitempty" yaml:"refused,omitempty"`
	Window               string  `json:"window" yaml:"window"`
	Requests             uint64  `json:"requests" yaml:"requests"`
	Throughput           float64 `json:"throughput" yaml:"throughput"`
	MeanThroughput       float64 `json:"mean_throughput" yaml:"mean_throughput"`
	MeanHold             string  `json:"mean_hold" yaml:"mean_hold"`
	Little               float64 `json:"little" yaml:"little"`
	Peak                 int32   `json:"peak" yaml:"peak"`
	P99InUse             int32   `json:"p99_in_use" yaml:"p99_in_use"`
	Headroom             float64 `json:"headroom" yaml:"headroom"`
	CurrentMaxConcurrent int32   `json:"current_max_concurrent" yaml:"current_max_concurrent"`
	CurrentMaxQueue      int32   `json:"current_max_queue" yaml:"current_max_queue"`
	CurrentMaxWait       string  `json:"current_max_wait" yaml:"current_max_wait"`
	MaxConcurrent        int32   `json:"max_concurrent" yaml:"max_concurrent"`
	MaxQueue             int32   `json:"max_queue" yaml:"max_queue"`
}

// NewSuggestionView converts an API message to its JSON form.
func NewSuggestionView(s *adminv1.Suggestion) SuggestionView {
	return SuggestionView{Name: s.GetName(), Refused: s.GetRefused(), Window: s.GetWindow().AsDuration().String(),
		Requests: s.GetRequests(), Throughput: s.GetThroughput(), MeanThroughput: s.GetMeanThroughput(),
		MeanHold: s.GetMeanHold().AsDuration().Round(100 * time.Microsecond).String(), Little: s.GetLittle(), Peak: s.GetPeak(), P99InUse: s.GetP99InUse(),
		Headroom: s.GetHeadroom(), CurrentMaxConcurrent: s.GetCurrentMaxConcurrent(), CurrentMaxQueue: s.GetCurrentMaxQueue(),
		CurrentMaxWait: s.GetCurrentMaxWait().AsDuration().String(), MaxConcurrent: s.GetMaxConcurrent(), MaxQueue: s.GetMaxQueue()}
}

type suggestJSON struct {
	Suggestions []SuggestionView `json:"suggestions"`
}

// suggest answers GET /v1/bulkheads:suggest (every bulkhead) and
// GET /v1/bulkheads/NAME/suggest, with ?window=5m&headroom=0.25&min_requests=100.
func (s *Server) suggest(w http.ResponseWriter, r *http.Request, name string) {
	req := &adminv1.SuggestBulkheadsRequest{Name: name}
	q := r.URL.Query()
	var inv invalidError
	if v := q.Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			inv.add("window", "not a duration: "+strconv.Quote(v))
		}
		req.Window = durationpb.New(d)
	}
	if v := q.Get("headroom"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			inv.add("headroom", "not a number: "+strconv.Quote(v))
		}
		req.Headroom = f
	}
	if v := q.Get("min_requests"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			inv.add("min_requests", "not an integer: "+strconv.Quote(v))
		}
		req.MinRequests = int32(n)
	}
	if err := inv.err(); err != nil {
		s.writeError(w, r, err)
		return
	}
	resp, err := s.svc.SuggestBulkheads(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := suggestJSON{Suggestions: []SuggestionView{}}
	for _, sg := range resp.GetSuggestions() {
		out.Suggestions = append(out.Suggestions, NewSuggestionView(sg))
	}
	writeJSON(w, http.StatusOK, out)
}
