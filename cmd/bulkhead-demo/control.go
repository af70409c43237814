package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// upstream is what the demo does to an upstream: change its response time
// and read its peak concurrency. The local demo's upstreams are in process
// (localUpstream); traffic mode reaches those of `bulkhead-demo upstream`
// through their control API (remoteUpstream). Both are safe for concurrent
// use.
type upstream interface {
	// SetDelayRange sets the response time of later requests, drawn per
	// request from [lo, hi].
	SetDelayRange(ctx context.Context, lo, hi time.Duration) error
	// TakePeak returns the most requests the upstream served at once since
	// the previous TakePeak (or its start), and starts a new period.
	TakePeak(ctx context.Context) (int, error)
}

var (
	_ upstream = localUpstream{}
	_ upstream = (*remoteUpstream)(nil)
)

// localUpstream is an upstream in this process.
type localUpstream struct{ u *testbed.Upstream }

func (l localUpstream) SetDelayRange(_ context.Context, lo, hi time.Duration) error {
	l.u.SetDelayRange(lo, hi)
	return nil
}

func (l localUpstream) TakePeak(context.Context) (int, error) {
	n := l.u.Max()
	l.u.ResetMax()
	return n, nil
}

// The control API of `bulkhead-demo upstream`, on a listener of its own
// (never behind Envoy):
//
//	PUT  /delay?lo=1.5s&hi=2.5s  204; sets the response time
//	POST /peak                   200 {"peak": 12, "inflight": 3}; takes the peak
const (
	controlDelayPath = "/delay"
	controlPeakPath  = "/peak"
)

// controlTimeout bounds one call to an upstream's control API.
const controlTimeout = 800 * time.Millisecond

// peakReport is the body of POST /peak.
type peakReport struct {
	Peak     int `json:"peak"`
	Inflight int `json:"inflight"`
}

// controlHandler serves u's control API; logf reports each change of the
// response time.
func controlHandler(u *testbed.Upstream, logf func(format string, args ...any)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT "+controlDelayPath, func(w http.ResponseWriter, r *http.Request) {
		lo, errLo := time.ParseDuration(r.URL.Query().Get("lo"))
		hi, errHi := time.ParseDuration(r.URL.Query().Get("hi"))
		if err := errors.Join(errLo, errHi); err != nil || lo < 0 || hi < lo {
			http.Error(w, "want ?lo=DURATION&hi=DURATION with 0 <= lo <= hi", http.StatusBadRequest)
			return
		}
		u.SetDelayRange(lo, hi)
		logf("%s: response time now %v-%v", u.Name(), lo, hi)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST "+controlPeakPath, func(w http.ResponseWriter, _ *http.Request) {
		rep := peakReport{Peak: u.Max(), Inflight: u.Inflight()}
		u.ResetMax()
		w.Header().Set("content-type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	})
	return mux
}

// remoteUpstream is the control API of an upstream in another process.
type remoteUpstream struct {
	base   string // http://host:port
	client *http.Client
}

func newRemoteUpstream(base string, client *http.Client) *remoteUpstream {
	return &remoteUpstream{base: base, client: client}
}

func (r *remoteUpstream) SetDelayRange(ctx context.Context, lo, hi time.Duration) error {
	q := url.Values{"lo": {lo.String()}, "hi": {hi.String()}}
	_, err := r.call(ctx, http.MethodPut, controlDelayPath+"?"+q.Encode(), http.StatusNoContent)
	return err
}

func (r *remoteUpstream) TakePeak(ctx context.Context) (int, error) {
	body, err := r.call(ctx, http.MethodPost, controlPeakPath, http.StatusOK)
	if err != nil {
		return 0, err
	}
	var rep peakReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return 0, fmt.Errorf("upstream control %s: %w", r.base, err)
	}
	return rep.Peak, nil
}

// call sends one request and returns the body (up to 4 KiB) of a want
// answer.
func (r *remoteUpstream) call(ctx context.Context, method, path string, want int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("upstream control: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return nil, fmt.Errorf("upstream control %s%s: %w", r.base, path, err)
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("upstream control %s%s: %s", r.base, path, resp.Status)
	}
	return body, nil
}
