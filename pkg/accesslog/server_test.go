package accesslog

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestDownstreamEndReleasesOnce(t *testing.T) {
	e := newEnv(t)
	token := e.grant(t)
	if e.ledger.Len() != 1 || e.inUse() != 1 {
		t.Fatalf("setup: %d leases, %d in use", e.ledger.Len(), e.inUse())
	}
	e.send(t, httpLogs(ident("n1"), endOf(token)), httpLogs(nil, endOf(token)))

	if e.ledger.Len() != 0 || e.inUse() != 0 {
		t.Fatalf("after the access log: %d leases, %d in use; want 0, 0", e.ledger.Len(), e.inUse())
	}
	if got := e.reg.Get("catalog").Snapshot(); got.Released != 1 || got.DuplicateReleases != 0 {
		t.Fatalf("limiter released %d, duplicates %d; want 1, 0", got.Released, got.DuplicateReleases)
	}
	if e.rec.entryCount("released") != 1 || e.rec.entryCount("duplicate") != 1 {
		t.Fatalf("entries = %v, want released 1, duplicate 1", e.rec.entries)
	}
	if got := e.rec.outcomeCount("catalog", bulkhead.Success); got != 1 {
		t.Fatalf("success outcomes = %d, want 1 (%v)", got, e.rec.outcomes)
	}
}

func TestEntryResults(t *testing.T) {
	str := func(v *structpb.Value) *corev3.Metadata {
		return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{permit.MetadataNamespace: {Fields: map[string]*structpb.Value{permit.MetadataToken: v}}}}
	}
	const neverIssued = "AAAAAAAAAAAAAAAAAAAAAA" // well-formed, unknown
	tests := []struct {
		name      string
		entry     func(token string) *datav3.HTTPAccessLogEntry
		result    string
		releasing bool
	}{
		{"released", endOf, "released", true},
		{"unknown token", func(string) *datav3.HTTPAccessLogEntry { return endOf(neverIssued) }, "unknown", false},
		{"malformed token", func(string) *datav3.HTTPAccessLogEntry { return endOf("not a token") }, "unknown", false},
		{"no metadata", func(string) *datav3.HTTPAccessLogEntry {
			return httpEntry(nil, datav3.AccessLogType_DownstreamEnd, 403, &datav3.ResponseFlags{UnauthorizedDetails: &datav3.ResponseFlags_Unauthorized{}})
		}, "no_token", false},
		{"other namespace", func(tok string) *datav3.HTTPAccessLogEntry {
			m := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb": tokenMeta(tok).FilterMetadata[permit.MetadataNamespace]}}
			return httpEntry(m, datav3.AccessLogType_DownstreamEnd, 200, nil)
		}, "no_token", false},
		{"token not a string", func(string) *datav3.HTTPAccessLogEntry {
			return httpEntry(str(structpb.NewNumberValue(7)), datav3.AccessLogType_DownstreamEnd, 200, nil)
		}, "no_token", false},
		{"empty token", func(string) *datav3.HTTPAccessLogEntry { return endOf("") }, "no_token", false},
		{"no common properties", func(string) *datav3.HTTPAccessLogEntry { return &datav3.HTTPAccessLogEntry{} }, "not_end", false},
	}
	for _, typ := range []datav3.AccessLogType{datav3.AccessLogType_NotSet, datav3.AccessLogType_DownstreamStart,
		datav3.AccessLogType_DownstreamPeriodic, datav3.AccessLogType_UpstreamPoolReady, datav3.AccessLogType_UpstreamPeriodic,
		datav3.AccessLogType_UpstreamEnd, datav3.AccessLogType_TcpConnectionEnd} {
		tests = append(tests, struct {
			name      string
			entry     func(token string) *datav3.HTTPAccessLogEntry
			result    string
			releasing bool
		}{typ.String(), func(tok string) *datav3.HTTPAccessLogEntry { return httpEntry(tokenMeta(tok), typ, 200, nil) }, "not_end", false})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			token := e.grant(t)
			e.send(t, httpLogs(ident("n1"), tt.entry(token)))
			if got := e.rec.entryCount(tt.result); got != 1 {
				t.Fatalf("entries = %v, want %s: 1", e.rec.entries, tt.result)
			}
			wantLeases := 1
			if tt.releasing {
				wantLeases = 0
			}
			if e.ledger.Len() != wantLeases || e.inUse() != wantLeases {
				t.Fatalf("%d leases, %d in use; want %d", e.ledger.Len(), e.inUse(), wantLeases)
			}
			if !tt.releasing && len(e.rec.outcomes) != 0 {
				t.Fatalf("an entry that released nothing recorded an outcome: %v", e.rec.outcomes)
			}
		})
	}
}

func TestIdentifierOnlyInFirstMessage(t *testing.T) {
	var buf testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, func(s *Server) { s.log = log })
	t1, t2, t3 := e.grant(t), e.grant(t), e.grant(t)
	e.send(t,
		httpLogs(ident("node-1"), endOf(t1)),
		httpLogs(nil, endOf(t2)),
		httpLogs(ident("node-2"), endOf(t3)), // a later identifier is not expected; it must not hurt
	)
	if e.ledger.Len() != 0 || e.rec.entryCount("released") != 3 {
		t.Fatalf("%d leases left, entries %v", e.ledger.Len(), e.rec.entries)
	}
	out := buf.String()
	if n := strings.Count(out, "access-log stream opened"); n != 1 || !strings.Contains(out, "node=node-1") {
		t.Fatalf("log:\n%s\nwant one 'stream opened' naming node-1", out)
	}
}

func TestConcurrentStreams(t *testing.T) {
	const streams, perStream = 8, 25
	e := newEnv(t)
	tokens := make([][]string, streams)
	for i := range tokens {
		for range perStream {
			tokens[i] = append(tokens[i], e.grant(t))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := e.client.StreamAccessLogs(ctx)
			if err != nil {
				errs <- err
				return
			}
			for j, tok := range tokens[i] {
				var id *alsv3.StreamAccessLogsMessage_Identifier
				if j == 0 {
					id = ident(fmt.Sprintf("worker-%d", i))
				}
				// Every token twice: the second is a duplicate.
				if err := stream.Send(httpLogs(id, endOf(tok), endOf(tok))); err != nil {
					errs <- err
					return
				}
			}
			_, err = stream.CloseAndRecv()
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if e.ledger.Len() != 0 || e.inUse() != 0 {
		t.Fatalf("%d leases, %d in use after every release", e.ledger.Len(), e.inUse())
	}
	if r, d := e.rec.entryCount("released"), e.rec.entryCount("duplicate"); r != streams*perStream || d != streams*perStream {
		t.Fatalf("released %d, duplicate %d; want %d each", r, d, streams*perStream)
	}
	if s := e.reg.Get("catalog").Snapshot(); s.Released != streams*perStream || s.DuplicateReleases != 0 {
		t.Fatalf("limiter: released %d, duplicates %d", s.Released, s.DuplicateReleases)
	}
	testkit.Eventually(t, "streams closed", func() bool { return e.rec.streams.Load() == 0 })
	if e.rec.opened.Load() != streams {
		t.Fatalf("opened %d streams, want %d", e.rec.opened.Load(), streams)
	}
}

func TestStreamEnds(t *testing.T) {
	t.Run("EOF", func(t *testing.T) {
		e := newEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stream, err := e.client.StreamAccessLogs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(httpLogs(ident("n"))); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "stream open", func() bool { return e.rec.streams.Load() == 1 })
		resp, err := stream.CloseAndRecv()
		if err != nil || resp == nil {
			t.Fatalf("CloseAndRecv = %v, %v; want a response", resp, err)
		}
		testkit.Eventually(t, "stream closed", func() bool { return e.rec.streams.Load() == 0 })
	})
	t.Run("client cancels", func(t *testing.T) {
		e := newEnv(t)
		token := e.grant(t)
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := e.client.StreamAccessLogs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(httpLogs(ident("n"), endOf(token))); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "entry handled", func() bool { return e.rec.entryCount("released") == 1 })
		cancel()
		testkit.Eventually(t, "stream closed", func() bool { return e.rec.streams.Load() == 0 })
		if e.ledger.Len() != 0 {
			t.Fatal("lease not released")
		}
	})
}

func TestOutcome(t *testing.T) {
	tests := []struct {
		name  string
		code  uint32
		flags *datav3.ResponseFlags
		want  bulkhead.Outcome
	}{
		{"200", 200, nil, bulkhead.Success},
		{"204", 204, &datav3.ResponseFlags{}, bulkhead.Success},
		{"404", 404, nil, bulkhead.Success},
		{"429 from upstream", 429, nil, bulkhead.Success},
		{"499", 499, nil, bulkhead.Success},
		{"500", 500, nil, bulkhead.Failure},
		{"503", 503, nil, bulkhead.Failure},
		{"504 upstream timeout", 504, &datav3.ResponseFlags{UpstreamRequestTimeout: true}, bulkhead.Failure},
		{"200 then upstream reset", 200, &datav3.ResponseFlags{UpstreamRemoteReset: true}, bulkhead.Failure},
		{"200 then client went away", 200, &datav3.ResponseFlags{DownstreamConnectionTermination: true}, bulkhead.Aborted},
		{"0 upstream remote reset", 0, &datav3.ResponseFlags{UpstreamRemoteReset: true}, bulkhead.Failure},
		{"0 local reset", 0, &datav3.ResponseFlags{LocalReset: true}, bulkhead.Failure},
		{"0 connection failure", 0, &datav3.ResponseFlags{UpstreamConnectionFailure: true}, bulkhead.Failure},
		{"0 stream idle timeout", 0, &datav3.ResponseFlags{StreamIdleTimeout: true}, bulkhead.Failure},
		{"0 downstream termination", 0, &datav3.ResponseFlags{DownstreamConnectionTermination: true}, bulkhead.Aborted},
		{"0 downstream remote reset", 0, &datav3.ResponseFlags{DownstreamRemoteReset: true}, bulkhead.Aborted},
		{"0 both resets", 0, &datav3.ResponseFlags{DownstreamRemoteReset: true, UpstreamRemoteReset: true}, bulkhead.Failure},
		{"0 no flags", 0, nil, bulkhead.Failure},
		{"0 empty flags", 0, &datav3.ResponseFlags{}, bulkhead.Failure},
	}
	for _, tt := range tests {
		if got := outcome(viewOf(t, httpEntry(nil, datav3.AccessLogType_DownstreamEnd, tt.code, tt.flags))); got != tt.want {
			t.Errorf("%s: outcome = %d, want %d", tt.name, got, tt.want)
		}
	}
	if got := outcome(viewOf(t, &datav3.HTTPAccessLogEntry{})); got != bulkhead.Failure {
		t.Errorf("empty entry: outcome = %d, want failure", got)
	}
}

func TestOutcomeRecordedForReleasedEntries(t *testing.T) {
	e := newEnv(t)
	t1, t2, t3 := e.grant(t), e.grant(t), e.grant(t)
	e.send(t, httpLogs(ident("n"),
		httpEntry(tokenMeta(t1), datav3.AccessLogType_DownstreamEnd, 503, nil),
		httpEntry(tokenMeta(t2), datav3.AccessLogType_DownstreamEnd, 0, &datav3.ResponseFlags{DownstreamConnectionTermination: true}),
		httpEntry(tokenMeta(t3), datav3.AccessLogType_DownstreamEnd, 201, nil),
		httpEntry(tokenMeta(t3), datav3.AccessLogType_DownstreamEnd, 500, nil), // duplicate: no outcome
	))
	for o, want := range map[bulkhead.Outcome]int{bulkhead.Success: 1, bulkhead.Failure: 1, bulkhead.Aborted: 1} {
		if got := e.rec.outcomeCount("catalog", o); got != want {
			t.Errorf("outcome %d: %d, want %d", o, got, want)
		}
	}
}
