package authz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
	"github.com/bulkhead-mesh/bulkhead/pkg/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeRecorder counts what the server records.
type fakeRecorder struct {
	mu        sync.Mutex
	waited    map[string]int
	invalid   map[string]int
	unmatched map[string]int
	badTTL    map[string]int
	untrusted map[string]int // UntrustedPriority by dependency
	inputs    map[string]int // InvalidInput by input
}

var (
	_ Recorder      = (*fakeRecorder)(nil)
	_ InputRecorder = (*fakeRecorder)(nil)
)

func newFakeRecorder() *fakeRecorder {
	return &fakeRecorder{waited: map[string]int{}, invalid: map[string]int{}, unmatched: map[string]int{}, badTTL: map[string]int{},
		untrusted: map[string]int{}, inputs: map[string]int{}}
}

func (r *fakeRecorder) UntrustedPriority(dep string)      { r.inc(r.untrusted, dep) }
func (r *fakeRecorder) InvalidInput(input bulkhead.Input) { r.inc(r.inputs, string(input)) }

func (r *fakeRecorder) Waited(dep string, _ time.Duration)    { r.inc(r.waited, dep) }
func (r *fakeRecorder) InvalidPriority(dep string)            { r.inc(r.invalid, dep) }
func (r *fakeRecorder) Unmatched(o bulkhead.UnmatchedOutcome) { r.inc(r.unmatched, string(o)) }
func (r *fakeRecorder) InvalidLeaseTTL(dep string)            { r.inc(r.badTTL, dep) }

func (r *fakeRecorder) inc(m map[string]int, k string) {
	r.mu.Lock()
	m[k]++
	r.mu.Unlock()
}

func (r *fakeRecorder) count(m map[string]int, k string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return m[k]
}

// fakeObserver records the sources of ended leases.
type fakeObserver struct {
	mu      sync.Mutex
	ended   map[permit.Source]int
	ignored map[permit.Result]int
}

func newFakeObserver() *fakeObserver {
	return &fakeObserver{ended: map[permit.Source]int{}, ignored: map[permit.Result]int{}}
}

func (o *fakeObserver) Ended(_ permit.Lease, src permit.Source, _ time.Time) {
	o.mu.Lock()
	o.ended[src]++
	o.mu.Unlock()
}

func (o *fakeObserver) Ignored(_ permit.Source, r permit.Result) {
	o.mu.Lock()
	o.ignored[r]++
	o.mu.Unlock()
}

func (o *fakeObserver) endedBy(src permit.Source) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ended[src]
}

// env is a Server over a real registry and ledger, reached through a real
// gRPC client over bufconn.
type env struct {
	reg    *bulkhead.Registry
	ledger *permit.Memory
	obs    *fakeObserver
	rec    *fakeRecorder
	srv    *Server
	client authv3.AuthorizationClient
}

type envConfig struct {
	bulkheads  map[string]bulkhead.Settings
	policy     Policy
	limiterClk clock.Clock // nil: real
	ledgerOpts []permit.Option
	memOpts    []admission.MemoryOption
	opts       []Option
}

func newEnv(t *testing.T, cfg envConfig) *env {
	t.Helper()
	var ropts []bulkhead.Option
	if cfg.limiterClk != nil {
		ropts = append(ropts, bulkhead.WithClock(cfg.limiterClk))
	}
	e := &env{reg: bulkhead.NewRegistry(ropts...), obs: newFakeObserver(), rec: newFakeRecorder()}
	if _, err := e.reg.Apply(cfg.bulkheads); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	e.ledger = permit.NewMemory(clock.Real{}, append([]permit.Option{permit.WithObserver(e.obs)}, cfg.ledgerOpts...)...)
	l := admission.NewMemory(e.reg, e.ledger, permit.Heartbeat{}, cfg.memOpts...)
	e.srv = New(e.reg, l, e.rec, cfg.policy, append([]Option{WithInputRecorder(e.rec)}, cfg.opts...)...)
	e.client = authv3.NewAuthorizationClient(serve(t, e.srv))
	return e
}

// serve runs srv on a bufconn gRPC server and returns a client connection;
// both are stopped when the test ends.
func serve(t *testing.T, srv *Server) *grpc.ClientConn {
	t.Helper()
	gs := grpc.NewServer(wire.ServerCodec())
	Register(gs, srv)
	return testkit.ServeBufconn(t, gs).Dial(t)
}

func settings(limit, queue int, wait time.Duration) bulkhead.Settings {
	return bulkhead.Settings{MaxConcurrent: limit, MaxQueue: queue, MaxWait: wait}
}

func checkReq(ext, headers map[string]string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: ext,
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "GET", Path: "/", Headers: headers,
		}},
	}}
}

// fromSource sets the downstream address of req, as Envoy reports it.
func fromSource(req *authv3.CheckRequest, addr string) *authv3.CheckRequest {
	req.Attributes.Source = &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
		SocketAddress: &corev3.SocketAddress{Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}}}}}
	return req
}

func forKey(key string) *authv3.CheckRequest {
	return checkReq(map[string]string{"bulkhead": key}, nil)
}

func snap(t testing.TB, reg *bulkhead.Registry, key string) bulkhead.Snapshot {
	t.Helper()
	l := reg.Get(key)
	if l == nil {
		t.Fatalf("no bulkhead %q", key)
	}
	return l.Snapshot()
}

// denial is a decoded rejection.
type denial struct {
	status  int
	headers map[string]string
	body    rejectionBody
}

var validReasons = map[string]bool{"queue_full": true, "shed": true, "timeout": true, "unknown_bulkhead": true, "circuit_open": true, "ledger_unavailable": true}

// parseDenial checks that resp is a well-formed rejection and decodes it.
func parseDenial(resp *authv3.CheckResponse) (denial, error) {
	var d denial
	if resp.GetStatus().GetCode() == int32(codes.OK) {
		return d, errors.New("status is OK")
	}
	dr := resp.GetDeniedResponse()
	if dr == nil {
		return d, fmt.Errorf("no DeniedResponse in %v", resp)
	}
	if resp.GetDynamicMetadata() != nil {
		return d, errors.New("a denial carries dynamic metadata")
	}
	d.status = int(dr.GetStatus().GetCode())
	d.headers = map[string]string{}
	for _, h := range dr.GetHeaders() {
		k := h.GetHeader().GetKey()
		if _, dup := d.headers[k]; dup {
			return d, fmt.Errorf("header %q twice", k)
		}
		if k != strings.ToLower(k) {
			return d, fmt.Errorf("header %q not lower case", k)
		}
		d.headers[k] = h.GetHeader().GetValue()
	}
	for _, k := range []string{"retry-after", HeaderReason, "content-type"} {
		if _, ok := d.headers[k]; !ok {
			return d, fmt.Errorf("no %s header", k)
		}
	}
	if ct := d.headers["content-type"]; ct != "application/json" {
		return d, fmt.Errorf("content-type %q", ct)
	}
	dec := json.NewDecoder(strings.NewReader(dr.GetBody()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d.body); err != nil {
		return d, fmt.Errorf("body %q: %w", dr.GetBody(), err)
	}
	if d.body.Error != "bulkhead rejected" {
		return d, fmt.Errorf("body error %q", d.body.Error)
	}
	if !validReasons[d.body.Reason] || d.body.Reason != d.headers[HeaderReason] {
		return d, fmt.Errorf("reason: body %q, header %q", d.body.Reason, d.headers[HeaderReason])
	}
	if hb, ok := d.headers[HeaderBulkhead]; ok == (d.body.Bulkhead == "") || d.body.Bulkhead != hb {
		// x-bulkhead is sent exactly when there is a (header-safe) key to echo.
		return d, fmt.Errorf("bulkhead: body %q, header %q", d.body.Bulkhead, d.headers[HeaderBulkhead])
	}
	if echoable(d.body.Bulkhead) != d.body.Bulkhead {
		return d, fmt.Errorf("bulkhead %q is not header-safe", d.body.Bulkhead)
	}
	return d, nil
}

// wantDenial fails unless resp is a rejection with this status, reason and
// bulkhead.
func wantDenial(t testing.TB, resp *authv3.CheckResponse, err error, status int, reason, key string) denial {
	t.Helper()
	if err != nil {
		t.Fatalf("Check: gRPC error %v, want a denial", err)
	}
	d, perr := parseDenial(resp)
	if perr != nil {
		t.Fatalf("not a valid denial: %v", perr)
	}
	if d.status != status || d.body.Reason != reason || d.body.Bulkhead != key {
		t.Fatalf("denial = status %d reason %q bulkhead %q, want %d %q %q", d.status, d.body.Reason, d.body.Bulkhead, status, reason, key)
	}
	return d
}

// wantAdmitted fails unless resp is OK with a token and key in its dynamic
// metadata; it returns the token.
func wantAdmitted(t testing.TB, resp *authv3.CheckResponse, err error, key string) string {
	t.Helper()
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	token, gotKey, perr := parseAdmitted(resp)
	if perr != nil {
		t.Fatalf("not a valid admission: %v", perr)
	}
	if gotKey != key {
		t.Fatalf("metadata bulkhead = %q, want %q", gotKey, key)
	}
	return token
}

func parseAdmitted(resp *authv3.CheckResponse) (token, key string, err error) {
	if resp.GetStatus().GetCode() != int32(codes.OK) || resp.GetOkResponse() == nil {
		return "", "", fmt.Errorf("not OK: %v", resp)
	}
	f := resp.GetDynamicMetadata().GetFields()
	token, key = f[permit.MetadataToken].GetStringValue(), f[permit.MetadataBulkhead].GetStringValue()
	if len(token) != permit.TokenLen || key == "" || len(f) != 2 {
		return "", "", fmt.Errorf("dynamic metadata %v", resp.GetDynamicMetadata())
	}
	return token, key, nil
}

type checkResult struct {
	resp *authv3.CheckResponse
	err  error
}

// checkAsync runs a Check in a goroutine.
func checkAsync(ctx context.Context, c authv3.AuthorizationClient, req *authv3.CheckRequest) <-chan checkResult {
	ch := make(chan checkResult, 1)
	go func() {
		resp, err := c.Check(ctx, req)
		ch <- checkResult{resp, err}
	}()
	return ch
}

func recvResult(t testing.TB, ch <-chan checkResult) checkResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("Check did not return within 5s")
		return checkResult{}
	}
}

// hold takes n permits of key directly from its limiter and releases them
// at cleanup.
func hold(t testing.TB, reg *bulkhead.Registry, key string, n int) []bulkhead.Permit {
	t.Helper()
	var ps []bulkhead.Permit
	for range n {
		p, err := reg.Get(key).TryAcquire(bulkhead.Critical)
		if err != nil {
			t.Fatalf("TryAcquire: %v", err)
		}
		ps = append(ps, p)
	}
	t.Cleanup(func() {
		for _, p := range ps {
			p.Release()
		}
	})
	return ps
}
