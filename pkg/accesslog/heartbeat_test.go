package accesslog

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
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
	silent *permit.SilentNodes
	logs   *bytes.Buffer
	srv    *Server
}

var hb = permit.Heartbeat{Interval: time.Second, TTL: 3 * time.Second}

func newHBEnv(t *testing.T, h permit.Heartbeat) *hbEnv {
	t.Helper()
	e := &hbEnv{clk: clock.NewFake(time.Unix(1_790_000_000, 0)), reg: bulkhead.NewRegistry(), rec: newFakeRecorder(), logs: &bytes.Buffer{}}
	if _, err := e.reg.Apply(map[string]bulkhead.Settings{"catalog": {MaxConcurrent: 2}}); err != nil {
		t.Fatal(err)
	}
	e.ledger = permit.NewMemory(e.clk)
	e.silent = permit.NewSilentNodes(slog.New(slog.NewTextHandler(e.logs, nil)))
	e.srv = New(admission.NewMemory(e.reg, e.ledger, h, admission.WithClock(e.clk)), e.rec, nil, WithClock(e.clk), WithHeartbeat(h),
		WithSilentNodes(e.silent))
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
		structString("BBBBBBBBBBBBBBBBBBBBBA")), datav3.AccessLogType_DownstreamPeriodic, 0, nil)))
	if e.inUse() != 2 || e.rec.entryCount("unknown") != 1 {
		t.Fatalf("a periodic entry naming no bulkhead was adopted (in use %d)", e.inUse())
	}
	// Past one TTL and one interval after the start, unknown tokens are
	// forgeries or forgotten: not adopted.
	e.clk.Advance(hb.TTL + hb.Interval)
	e.periodic(t, st, "CCCCCCCCCCCCCCCCCCCCCA")
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

// The shipped Envoy config sends periodic entries on streams of their own
// (its batched heartbeat logger), apart from the end entries: whether a node
// heartbeats is judged by node, whichever of its streams carried them.
// Here envoy-1's request A loses its own periodic entries and ends after 5 s
// on envoy-1's release stream, while request B's periodic entries come on
// the heartbeat stream of the node named by heartbeater.
func TestHeartbeatTwoStreamsOfOneNode(t *testing.T) {
	tests := []struct {
		name        string
		heartbeater string // the node whose heartbeat stream carries B's periodic entries
		before      bool   // B's periodic entries come only before A's grant
		expire      bool   // A's lease is reclaimed before its end entry
		wantProblem permit.HeartbeatProblem
		wantSilent  bool
	}{
		{name: "the node heartbeats on its other stream", heartbeater: "envoy-1"},
		{name: "reclaimed, the node heartbeats on its other stream", heartbeater: "envoy-1", expire: true,
			wantProblem: permit.EndedAfterExpiry},
		{name: "another node heartbeats", heartbeater: "envoy-2", wantProblem: permit.NoPeriodic, wantSilent: true},
		{name: "reclaimed, another node heartbeats", heartbeater: "envoy-2", expire: true,
			wantProblem: permit.EndedAfterExpiry, wantSilent: true},
		{name: "the node heartbeated before the grant only", heartbeater: "envoy-1", before: true,
			wantProblem: permit.NoPeriodic, wantSilent: true},
		{name: "reclaimed, the node heartbeated before the grant only", heartbeater: "envoy-1", before: true, expire: true,
			wantProblem: permit.EndedAfterExpiry, wantSilent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newHBEnv(t, hb)
			e.clk.Advance(time.Hour) // long after the start: nothing is adopted
			release := &stream{node: "envoy-1", logName: "bulkhead"}
			heartbeat := &stream{node: tt.heartbeater, logName: "bulkhead-heartbeat"}
			b := e.grant(t, time.Minute, tt.heartbeater)
			if tt.before {
				e.periodic(t, heartbeat, b)
				e.clk.Advance(time.Millisecond)
			}
			ttl := time.Minute
			if tt.expire {
				ttl = hb.TTL
			}
			a := e.grant(t, ttl, "envoy-1")
			for range 5 {
				e.clk.Advance(hb.Interval)
				if !tt.before {
					e.periodic(t, heartbeat, b)
				}
				e.ledger.Sweep()
			}
			if tt.expire != (e.inUse() == 1) {
				t.Fatalf("in use %d: A's lease reclaimed = %v, want %v", e.inUse(), e.inUse() == 1, tt.expire)
			}
			e.end(t, release, a)
			for _, p := range permit.HeartbeatProblems() {
				want := 0
				if p == tt.wantProblem {
					want = 1
				}
				if got := e.rec.otherCount("problem:" + string(p)); got != want {
					t.Errorf("problem %s counted %d times, want %d", p, got, want)
				}
			}
			if got := e.silent.Silent("envoy-1"); got != tt.wantSilent {
				t.Errorf("envoy-1 silent = %v, want %v", got, tt.wantSilent)
			}
		})
	}
}

// Batched periodic entries can come after their request's end entry. When
// the ledger cannot tell that the permit ended (the daemon restarted since
// the grant, or the lease had been reclaimed), the late entry must not adopt
// the finished request's permit.
func TestHeartbeatLatePeriodicAfterEnd(t *testing.T) {
	tests := []struct {
		name    string
		restart bool // the token is unknown: granted by an earlier process
	}{
		{name: "after a restart", restart: true},
		{name: "after the lease was reclaimed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newHBEnv(t, hb)
			release, heartbeat := &stream{node: "envoy-1"}, &stream{node: "envoy-1"}
			tok := "AAAAAAAAAAAAAAAAAAAAAA"
			if !tt.restart {
				e.clk.Advance(time.Hour)
				tok = e.grant(t, hb.TTL, "envoy-1")
				e.clk.Advance(hb.TTL)
				if e.ledger.Sweep() != 1 {
					t.Fatal("not reclaimed")
				}
			}
			e.end(t, release, tok)
			e.periodic(t, heartbeat, tok)
			if e.inUse() != 0 || e.rec.entryCount("adopted") != 0 {
				t.Fatalf("in use %d, adopted %d: a late periodic entry adopted an ended request's permit",
					e.inUse(), e.rec.entryCount("adopted"))
			}
			if e.rec.entryCount("late") != 1 || e.rec.otherCount("problem:renewed_after_expiry") != 0 {
				t.Fatalf("late %d, renewed_after_expiry %d", e.rec.entryCount("late"),
					e.rec.otherCount("problem:renewed_after_expiry"))
			}
		})
	}
}

// The nodes heard from are bounded: when full, the stale ones make room;
// with none stale, a new node is not remembered.
func TestHeardNodesBounded(t *testing.T) {
	h := newHeardNodes(3 * time.Second)
	t0 := time.Unix(1_790_000_000, 0)
	for i := range permit.MaxNodes {
		h.heard(fmt.Sprint("envoy-", i), t0)
	}
	h.heard("late", t0.Add(time.Second))
	if h.since("late", t0) || !h.since("envoy-0", t0) {
		t.Fatal("full of fresh nodes: want the new one left out and the old ones kept")
	}
	h.heard("envoy-1", t0.Add(2*time.Second)) // a known node is always updated
	h.heard("late", t0.Add(4*time.Second))    // envoy-0 and the others are stale now
	if !h.since("late", t0) || h.since("envoy-0", t0) || !h.since("envoy-1", t0.Add(2*time.Second)) {
		t.Fatal("stale nodes did not make room")
	}
	if h.since("late", t0.Add(5*time.Second)) {
		t.Fatal("heard at 4s, reported heard since 5s")
	}
}

// With heartbeats off, periodic entries do nothing.
func TestHeartbeatOff(t *testing.T) {
	e := newHBEnv(t, permit.Heartbeat{})
	tok := e.grant(t, time.Minute, "")
	e.periodic(t, &stream{}, tok)
	e.periodic(t, &stream{}, "AAAAAAAAAAAAAAAAAAAAAA")
	if e.inUse() != 1 || e.rec.entryCount("not_end") != 2 || e.rec.entryCount("renewed") != 0 {
		t.Fatalf("in use %d, not_end %d", e.inUse(), e.rec.entryCount("not_end"))
	}
}

func structString(s string) *structpb.Value { return structpb.NewStringValue(s) }

// A node whose heartbeat stream stalls for longer than the TTL is taken for
// silent by a late end entry on its release stream; when the same heartbeat
// stream carries periodic entries again, the node is no longer silent.
func TestHeartbeatStalledStreamResumes(t *testing.T) {
	e := newHBEnv(t, hb)
	e.clk.Advance(time.Hour)
	release, heartbeat := &stream{node: "envoy-1"}, &stream{node: "envoy-1"}
	tok := e.grant(t, hb.TTL, "envoy-1")
	e.periodic(t, heartbeat, tok) // the heartbeat stream works...
	e.clk.Advance(2 * hb.TTL)     // ...then stalls: the lease expires
	e.ledger.Sweep()
	e.end(t, release, tok)
	if !e.silent.Silent("envoy-1") {
		t.Fatal("a node unheard for a TTL, whose permit ended after expiry, is not taken for silent")
	}
	tok = e.grant(t, time.Minute, "envoy-1")
	e.clk.Advance(hb.Interval)
	e.periodic(t, heartbeat, tok)
	if e.silent.Silent("envoy-1") {
		t.Fatal("the node's heartbeat stream resumed, and the node is still silent")
	}
	e.end(t, release, tok)
}

// A replica that could not hear every periodic entry (its shared ledger
// was out of reach: Envoy's entries went to other replicas, and none could
// be forwarded to it) takes a permit it held across that spell, never
// renewed, or one that expired within a TTL of it, as no evidence: the node
// is not marked silent (chaos seed 21 saw it marked, its next Checks
// given the 60 s lease, and one whose end entry was lost held for 40 s).
// A permit granted after the spell is evidence again.
func TestHeartbeatSilenceNeedsHearingAll(t *testing.T) {
	e := newHBEnv(t, hb)
	e.clk.Advance(time.Hour)
	hearsAll := e.clk.Now()
	e.srv.hearsAll = func() time.Time { return hearsAll }
	st := &stream{node: "envoy-1"}

	tok := e.grant(t, time.Minute, "envoy-1")
	e.clk.Advance(time.Second)
	hearsAll = e.clk.Now() // an outage ended here, a second into the request
	e.clk.Advance(4 * time.Second)
	e.end(t, st, tok)
	if e.silent.Silent("envoy-1") || e.rec.otherCount("problem:no_periodic_entries") != 0 {
		t.Fatal("a permit held across the outage, never renewed, marked its node silent")
	}
	tok = e.grant(t, hb.TTL, "envoy-1")
	e.clk.Advance(2500 * time.Millisecond)
	hearsAll = e.clk.Now() // another outage ended here
	e.clk.Advance(2500 * time.Millisecond)
	e.ledger.Sweep()
	e.end(t, st, tok) // expired, its end 2.5 s after the outage: within a TTL of it
	if e.silent.Silent("envoy-1") {
		t.Fatal("an expiry within a TTL of the outage marked its node silent")
	}

	tok = e.grant(t, time.Minute, "envoy-1")
	e.clk.Advance(5 * time.Second)
	e.end(t, st, tok)
	if !e.silent.Silent("envoy-1") || e.rec.otherCount("problem:no_periodic_entries") != 1 {
		t.Fatal("a permit granted after the outage, never renewed, did not mark its node silent")
	}
}
