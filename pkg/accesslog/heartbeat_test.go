package accesslog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// hbEnv is a Server with heartbeat leases (interval 1 s, TTL 3 s) over a
// real ledger and registry on a fake clock, fed entries directly.
type hbEnv struct {
	clk    *clock.Fake
	reg    *bulkhead.Registry
	ledger *permit.Memory
	rec    *fakeRecorder
	silent *SilentNodes
	logs   *bytes.Buffer
	srv    *Server
}

var hb = Heartbeat{Interval: time.Second, TTL: 3 * time.Second}

func newHBEnv(t *testing.T, h Heartbeat) *hbEnv {
	t.Helper()
	e := &hbEnv{clk: clock.NewFake(time.Unix(1_790_000_000, 0)), reg: bulkhead.NewRegistry(), rec: newFakeRecorder(), logs: &bytes.Buffer{}}
	if _, err := e.reg.Apply(map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 2}}); err != nil {
		t.Fatal(err)
	}
	e.ledger = permit.NewMemory(e.clk)
	e.silent = NewSilentNodes(slog.New(slog.NewTextHandler(e.logs, nil)))
	e.srv = New(e.ledger, e.rec, nil, WithClock(e.clk), WithHeartbeat(h, e.reg), WithSilentNodes(e.silent))
	t.Cleanup(func() { e.ledger.Close(permit.Shutdown) })
	return e
}

// grant admits one request as the ext_authz server does, with lease ttl.
func (e *hbEnv) grant(t *testing.T, ttl time.Duration, node string) string {
	t.Helper()
	p, err := e.reg.Get("catalog").TryAcquire(bulkhead.Normal)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := e.ledger.Grant(p, permit.Grant{Bulkhead: "catalog", TTL: ttl, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (e *hbEnv) periodic(t *testing.T, st *stream, token string) {
	t.Helper()
	e.srv.entry(st, viewOf(t, httpEntry(tokenMeta(token), datav3.AccessLogType_DownstreamPeriodic, 0, nil)))
}

func (e *hbEnv) end(t *testing.T, st *stream, token string) {
	t.Helper()
	e.srv.entry(st, viewOf(t, endOf(token)))
}

func (e *hbEnv) inUse() int { return e.reg.Get("catalog").Snapshot().InUse }

// A permit lives while its request is heard from, however long, and is
// reclaimed one TTL after the last periodic entry.
func TestHeartbeatRenews(t *testing.T) {
	e := newHBEnv(t, hb)
	st := &stream{node: "envoy-1"}
	tok := e.grant(t, hb.TTL, "envoy-1")
	for range 600 { // ten minutes of a running request
		e.clk.Advance(hb.Interval)
		e.periodic(t, st, tok)
		if n := e.ledger.Sweep(); n != 0 {
			t.Fatalf("a renewed permit expired at %v", e.clk.Now())
		}
	}
	if got := e.rec.entryCount("renewed"); got != 600 {
		t.Fatalf("renewed %d, want 600", got)
	}
	e.clk.Advance(hb.TTL - time.Millisecond)
	if e.ledger.Sweep() != 0 {
		t.Fatal("expired before one TTL after the last renewal")
	}
	e.clk.Advance(time.Millisecond)
	if e.ledger.Sweep() != 1 || e.inUse() != 0 {
		t.Fatal("not reclaimed one TTL after the last renewal")
	}
}

// After a restart, a running request's periodic entry is adopted, past the
// limit if need be, and released by its end entry; within the adoption
// period only.
func TestHeartbeatAdopts(t *testing.T) {
	e := newHBEnv(t, hb)
	st := &stream{node: "envoy-1"}
	e.grant(t, hb.TTL, "")
	e.grant(t, hb.TTL, "") // the limit (2) is reached
	old := "AAAAAAAAAAAAAAAAAAAAAA"
	e.periodic(t, st, old)
	if e.inUse() != 3 || e.rec.entryCount("adopted") != 1 || e.rec.otherCount("adopted:catalog") != 1 {
		t.Fatalf("in use %d, adopted %d: want the running request counted past the limit", e.inUse(), e.rec.entryCount("adopted"))
	}
	holders, _ := e.ledger.Holders("catalog", 10)
	var adopted *permit.Lease
	for i := range holders {
		if holders[i].Adopted {
			adopted = &holders[i]
		}
	}
	if adopted == nil || adopted.Node != "envoy-1" || adopted.Token != old {
		t.Fatalf("holders %+v: want the adopted permit of envoy-1", holders)
	}
	e.periodic(t, st, old) // its next heartbeat renews it
	if e.inUse() != 3 || e.rec.entryCount("renewed") != 1 {
		t.Fatalf("second heartbeat: in use %d, renewed %d", e.inUse(), e.rec.entryCount("renewed"))
	}
	e.end(t, st, old)
	if e.inUse() != 2 || e.rec.entryCount("released") != 1 {
		t.Fatalf("after its end: in use %d", e.inUse())
	}
	// A token of a bulkhead that does not exist, or no bulkhead: counted.
	e.srv.entry(st, viewOf(t, httpEntry(metaWith(permit.MetadataNamespace, permit.MetadataToken,
		structString("BBBBBBBBBBBBBBBBBBBBBB")), datav3.AccessLogType_DownstreamPeriodic, 0, nil)))
	if e.inUse() != 2 || e.rec.entryCount("unknown") != 1 {
		t.Fatalf("a periodic entry naming no bulkhead was adopted (in use %d)", e.inUse())
	}
	// Past one TTL and one interval after the start, unknown tokens are
	// forgeries or forgotten: not adopted.
	e.clk.Advance(hb.TTL + hb.Interval)
	e.periodic(t, st, "CCCCCCCCCCCCCCCCCCCCCC")
	if e.inUse() != 2 || e.rec.entryCount("unknown") != 2 {
		t.Fatalf("adopted after the adoption period (in use %d)", e.inUse())
	}
}

// A permit reclaimed while its request still ran (a stalled Envoy) is
// adopted again by its next periodic entry, and the stall is counted.
func TestHeartbeatReadoptsAfterExpiry(t *testing.T) {
	e := newHBEnv(t, hb)
	st := &stream{node: "envoy-1"}
	e.clk.Advance(time.Hour) // long after the start: only real tokens count
	tok := e.grant(t, hb.TTL, "envoy-1")
	e.clk.Advance(hb.TTL)
	if e.ledger.Sweep() != 1 || e.inUse() != 0 {
		t.Fatal("not reclaimed")
	}
	e.periodic(t, st, tok)
	if e.inUse() != 1 || e.rec.otherCount("problem:renewed_after_expiry") != 1 || e.rec.entryCount("adopted") != 1 {
		t.Fatalf("in use %d: want the running request adopted again and the stall counted", e.inUse())
	}
	e.end(t, st, tok)
	if e.inUse() != 0 {
		t.Fatal("the re-adopted permit was not released by its end entry")
	}
}

// An Envoy without the periodic log: its long request's end entry tells,
// the node is logged once and remembered as silent (its next Checks get
// the long lease) until it sends a periodic entry.
func TestHeartbeatSilentNode(t *testing.T) {
	e := newHBEnv(t, hb)
	e.clk.Advance(time.Hour)
	st := &stream{node: "old-envoy"}
	// Reclaimed under the running request, then its end arrives.
	tok := e.grant(t, hb.TTL, "old-envoy")
	e.clk.Advance(5 * time.Second)
	e.ledger.Sweep()
	e.end(t, st, tok)
	if e.rec.otherCount("problem:ended_after_expiry") != 1 || !e.silent.Silent("old-envoy") {
		t.Fatal("an end entry after expiry did not mark the node silent")
	}
	// With the long lease, the next long request ends without renewals.
	tok = e.grant(t, time.Minute, "old-envoy")
	e.clk.Advance(5 * time.Second)
	e.end(t, st, tok)
	if e.rec.otherCount("problem:no_periodic_entries") != 1 {
		t.Fatal("a long request without periodic entries was not counted")
	}
	if n := strings.Count(e.logs.String(), "sends no periodic access-log entries"); n != 1 || !strings.Contains(e.logs.String(), "node=old-envoy") {
		t.Fatalf("logged %d times, want once naming the node:\n%s", n, e.logs.String())
	}
	// Short requests say nothing: they end before their first heartbeat.
	tok = e.grant(t, time.Minute, "envoy-2")
	e.clk.Advance(2 * time.Second)
	e.end(t, &stream{node: "envoy-2"}, tok)
	if e.silent.Silent("envoy-2") || e.rec.otherCount("problem:no_periodic_entries") != 1 {
		t.Fatal("a request shorter than 2.5 intervals marked its node silent")
	}
	// The old Envoy is fixed: its first periodic entry clears it.
	tok = e.grant(t, hb.TTL, "old-envoy")
	e.periodic(t, st, tok)
	if e.silent.Silent("old-envoy") {
		t.Fatal("a node that sends periodic entries is still silent")
	}
	e.end(t, st, tok)
}

// With heartbeats off, periodic entries do nothing.
func TestHeartbeatOff(t *testing.T) {
	e := newHBEnv(t, Heartbeat{})
	tok := e.grant(t, time.Minute, "")
	e.periodic(t, &stream{}, tok)
	e.periodic(t, &stream{}, "AAAAAAAAAAAAAAAAAAAAAA")
	if e.inUse() != 1 || e.rec.entryCount("not_end") != 2 || e.rec.entryCount("renewed") != 0 {
		t.Fatalf("in use %d, not_end %d", e.inUse(), e.rec.entryCount("not_end"))
	}
}

func structString(s string) *structpb.Value { return structpb.NewStringValue(s) }
