package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// The JSON API's paths.
const (
	pathList    = "/v1/bulkheads"
	pathWatch   = "/v1/bulkheads:watch"
	pathSuggest = "/v1/bulkheads:suggest"
	pathItem    = "/v1/bulkheads/" // + NAME, NAME:reset, NAME:circuit, NAME/override, NAME/holders, NAME/suggest
	// pathPprof serves the Go runtime's profiles (net/http/pprof), behind
	// the same authentication as the API: heap, goroutine, allocs,
	// profile?seconds=N (CPU), trace, ...
	pathPprof = "/debug/pprof/"
)

// errorBody is every JSON error response.
type errorBody struct {
	Error      string          `json:"error"`
	Field      string          `json:"field,omitempty"`
	Violations []violationJSON `json:"violations,omitempty"`
}

type violationJSON struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

type listJSON struct {
	Bulkheads []View      `json:"bulkheads"`
	Ledger    *LedgerView `json:"ledger,omitempty"`
}

type itemJSON struct {
	Bulkhead View  `json:"bulkhead"`
	Previous *View `json:"previous,omitempty"`
}

// jsonAPI returns the handler of the JSON API. Every request is
// authenticated first, with the same rules as gRPC.
func (s *Server) jsonAPI() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := s.auth.authenticate(r.Header.Get("Authorization"), r.TLS, r.RemoteAddr)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		r = r.WithContext(withCaller(r.Context(), c))
		s.route(w, r)
	})
}

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, pathPprof):
		if allow(w, r, http.MethodGet) {
			servePprof(w, r)
		}
		return
	case p == pathList:
		if allow(w, r, http.MethodGet) {
			s.list(w, r)
		}
		return
	case p == pathSuggest:
		if allow(w, r, http.MethodGet) {
			s.suggest(w, r, "")
		}
		return
	case p == pathWatch:
		if allow(w, r, http.MethodGet) {
			s.watchJSON(w, r)
		}
		return
	case strings.HasPrefix(p, pathItem):
		rest := strings.TrimPrefix(p, pathItem)
		if name, ok := strings.CutSuffix(rest, "/override"); ok && validName(name) {
			if allow(w, r, http.MethodDelete) {
				s.reset(w, r, name)
			}
			return
		}
		if name, ok := strings.CutSuffix(rest, "/suggest"); ok && validName(name) {
			if allow(w, r, http.MethodGet) {
				s.suggest(w, r, name)
			}
			return
		}
		if name, ok := strings.CutSuffix(rest, "/holders"); ok && validName(name) {
			if allow(w, r, http.MethodGet) {
				s.holders(w, r, name)
			}
			return
		}
		if name, ok := strings.CutSuffix(rest, ":circuit"); ok && validName(name) {
			if allow(w, r, http.MethodPost) {
				s.setCircuit(w, r, name)
			}
			return
		}
		if name, ok := strings.CutSuffix(rest, ":reset"); ok && validName(name) {
			if allow(w, r, http.MethodPost) {
				s.reset(w, r, name)
			}
			return
		}
		if !validName(rest) {
			break
		}
		switch r.Method {
		case http.MethodGet:
			s.get(w, r, rest)
		case http.MethodPatch:
			s.update(w, r, rest)
		default:
			allow(w, r, http.MethodGet, http.MethodPatch)
		}
		return
	}
	writeJSON(w, http.StatusNotFound, errorBody{Error: "no such endpoint: " + r.Method + " " + p +
		" (see GET /v1/bulkheads, GET|PATCH /v1/bulkheads/NAME, POST /v1/bulkheads/NAME:reset, POST /v1/bulkheads/NAME:circuit, GET /v1/bulkheads/NAME/holders, GET /v1/bulkheads[/NAME]:suggest, GET /v1/bulkheads:watch)"})
}

// servePprof serves /debug/pprof/NAME as net/http/pprof does.
func servePprof(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimPrefix(r.URL.Path, pathPprof) {
	case "cmdline":
		pprof.Cmdline(w, r)
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default: // the index, and the named profiles (heap, goroutine, ...)
		pprof.Index(w, r)
	}
}

// validName accepts a non-empty path segment; the Controller decides
// whether such a bulkhead exists.
func validName(n string) bool { return n != "" && !strings.ContainsAny(n, "/:") }

// allow reports whether r's method is one of methods, answering 405 when
// it is not.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "method " + r.Method + " not allowed; use " + strings.Join(methods, " or ")})
	return false
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	resp, err := s.svc.ListBulkheads(r.Context(), &adminv1.ListBulkheadsRequest{})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, listJSON{Bulkheads: Views(resp.GetBulkheads()), Ledger: NewLedgerView(resp.GetLedger())})
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, name string) {
	resp, err := s.svc.GetBulkhead(r.Context(), &adminv1.GetBulkheadRequest{Name: name})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, itemJSON{Bulkhead: NewView(resp.GetBulkhead())})
}

func (s *Server) update(w http.ResponseWriter, r *http.Request, name string) {
	req, err := decodePatch(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	req.Name = name
	resp, err := s.svc.UpdateBulkhead(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	prev := NewView(resp.GetPrevious())
	writeJSON(w, http.StatusOK, itemJSON{Bulkhead: NewView(resp.GetBulkhead()), Previous: &prev})
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request, name string) {
	resp, err := s.svc.ResetBulkhead(r.Context(), &adminv1.ResetBulkheadRequest{Name: name})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	prev := NewView(resp.GetPrevious())
	writeJSON(w, http.StatusOK, itemJSON{Bulkhead: NewView(resp.GetBulkhead()), Previous: &prev})
}

// holders answers the oldest holders of name's permits; the query's limit
// is ListHolders' (absent: 0).
func (s *Server) holders(w http.ResponseWriter, r *http.Request, name string) {
	req := &adminv1.ListHoldersRequest{Name: name}
	if q := r.URL.Query().Get("limit"); q != "" {
		n, err := strconv.ParseInt(q, 10, 64)
		if err != nil {
			inv := &invalidError{}
			inv.add("limit", "not an integer: "+strconv.Quote(q))
			s.writeError(w, r, inv)
			return
		}
		if _, err := holdersLimit(n); err != nil {
			s.writeError(w, r, err)
			return
		}
		req.Limit = int32(n) // within [0, MaxHolders]
	}
	resp, err := s.svc.ListHolders(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewHoldersView(name, resp))
}

// watchJSON streams newline-delimited JSON, one {"time", "bulkheads"}
// object per interval. An error after the first line ends the stream with
// a last line {"error": ...}.
func (s *Server) watchJSON(w http.ResponseWriter, r *http.Request) {
	var iv *durationpb.Duration
	if q := r.URL.Query().Get("interval"); q != "" {
		d, err := parseDuration("interval", q)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		iv = durationpb.New(d)
	}
	interval, err := watchInterval(iv)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	started := false
	err = s.svc.watch(r.Context(), interval, func(m *adminv1.WatchBulkheadsResponse) error {
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusOK)
		}
		line := struct {
			Time      any    `json:"time"`
			Bulkheads []View `json:"bulkheads"`
		}{m.GetTime().AsTime(), Views(m.GetBulkheads())}
		if err := enc.Encode(line); err != nil {
			return err
		}
		return rc.Flush()
	})
	switch {
	case err == nil || r.Context().Err() != nil:
	case !started:
		s.writeError(w, r, err)
	default:
		st := status.Convert(toStatus(err))
		if st.Code() != codes.Canceled {
			_ = enc.Encode(errorBody{Error: st.Message()})
		}
	}
}

// writeError answers err as JSON with the HTTP status of its gRPC code and
// logs the refusal.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		inv := &invalidError{}
		inv.add("", "request body exceeds 64 KiB")
		s.refused(r.Context(), r.Method+" "+r.URL.Path, r.RemoteAddr, toStatus(inv))
		writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: inv.Error()})
		return
	}
	var unsupported *unsupportedMediaError
	if errors.As(err, &unsupported) {
		inv := &invalidError{}
		inv.add("", unsupported.Error())
		s.refused(r.Context(), r.Method+" "+r.URL.Path, r.RemoteAddr, toStatus(inv))
		writeJSON(w, http.StatusUnsupportedMediaType, errorBody{Error: unsupported.Error()})
		return
	}
	serr := toStatus(err)
	s.refused(r.Context(), r.Method+" "+r.URL.Path, r.RemoteAddr, serr)
	st := status.Convert(serr)
	body := errorBody{Error: st.Message()}
	for _, v := range fieldViolations(st) {
		if body.Field == "" {
			body.Field = v.GetField()
		}
		body.Violations = append(body.Violations, violationJSON{Field: v.GetField(), Description: v.GetDescription()})
	}
	if st.Code() == codes.Unauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="bulkhead-admin"`)
	}
	writeJSON(w, httpStatus(st.Code()), body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
