package main

import (
	"math"
	"slices"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// LedgerCost is what the Redis ledger cost over a phase's window, per
// request completed in it: the calls the daemons made (their
// bulkhead_ledger_calls_total), what Redis ran (its INFO commandstats) and
// Redis's CPU (its INFO cpu; the /proc figures are Phase.CPU["redis"]).
type LedgerCost struct {
	Replicas int `json:"replicas"`
	// PerRequest is the daemons' calls per request by operation, every
	// result, summed over the replicas: acquire, release, renew, leave,
	// reopen (one script each); and lease when capacity leases made calls:
	// periodic (in TicksPerSecond too), but the price of the admissions
	// made from the leases, so counted against the requests as well.
	PerRequest map[string]float64 `json:"calls_per_request"`
	// TicksPerSecond is the periodic calls per second, every replica: state
	// (one pipeline of one state script per bulkhead) and replicas; lease
	// (one script per bulkhead) when capacity leases made calls.
	TicksPerSecond map[string]float64 `json:"tick_calls_per_second"`
	// CallMs is the daemons' mean time of one call by operation, in
	// milliseconds (bulkhead_ledger_call_seconds, every replica): an
	// access-log stream's entries are released one after another, so a
	// stream releases at most 1000 / CallMs["release"] permits a second.
	CallMs map[string]float64 `json:"call_ms"`
	// Failed is the calls that ended in an error or a time-out.
	Failed int64 `json:"failed_calls"`
	// ScriptsPerRequest is the scripts Redis ran (EVALSHA and EVAL calls)
	// less the ticks' (TickScripts), per request; EvalCalls the EVALs among
	// them (a script Redis did not have cached).
	ScriptsPerRequest float64 `json:"redis_scripts_per_request"`
	TickScripts       int64   `json:"redis_tick_scripts"`
	EvalCalls         int64   `json:"redis_eval_calls"`
	// InScriptsPerRequest is the data commands the scripts ran inside
	// Redis (HGET, ZADD...: everything commandstats counts but scripts,
	// INFO and connection commands), the ticks' included, per request.
	InScriptsPerRequest float64 `json:"redis_commands_in_scripts_per_request"`
	// Commands is every command's calls in the window (the harness's own
	// INFO included: one per window).
	Commands map[string]int64 `json:"redis_commands"`
	// ScriptUsPerRequest is the time Redis spent running scripts (the
	// commandstats usec of EVALSHA and EVAL, the commands inside included;
	// the ticks' too), per request: CPUMsPer1k less this is Redis's time
	// outside the scripts (reading and answering the calls).
	ScriptUsPerRequest float64 `json:"redis_script_us_per_request"`
	// CPUMsPer1k is Redis's CPU per 1,000 requests from its INFO
	// (used_cpu_sys + used_cpu_user: getrusage, microseconds).
	CPUMsPer1k float64 `json:"redis_cpu_ms_per_1k_requests"`
}

// outsideScripts are the commands besides the scripts (redisproc.IsScript)
// that a script does not run (introspection, connections, Pub/Sub
// subscriptions).
var outsideScripts = []string{"info", "ping", "hello", "select", "auth", "script", "script|load", "script|exists",
	"client", "client|setname", "client|setinfo", "client|id", "subscribe", "psubscribe", "ssubscribe",
	"unsubscribe", "punsubscribe", "command", "command|docs", "readonly"}

// requestOps are the ledger's calls made for requests; the others are
// periodic (ticks).
var requestOps = []admission.Op{admission.OpAcquire, admission.OpRelease, admission.OpRenew,
	admission.OpLeave, admission.OpReopen}

// ledgerCounts are bulkhead_ledger_calls_total summed over replicas.
type ledgerCounts struct {
	calls  map[string]float64 // by op, every result
	failed float64            // every op, results error and timeout
	// seconds and timed are bulkhead_ledger_call_seconds's sum and count,
	// by op.
	seconds, timed map[string]float64
}

// sumLedgerCalls sums bulkhead_ledger_calls_total over ms by op.
func sumLedgerCalls(ms []*testbed.Metrics) *ledgerCounts {
	c := &ledgerCounts{calls: map[string]float64{}, seconds: map[string]float64{}, timed: map[string]float64{}}
	for _, m := range ms {
		for _, s := range m.Samples("bulkhead_ledger_call_seconds_sum") {
			c.seconds[s.Labels["op"]] += s.Value
		}
		for _, s := range m.Samples("bulkhead_ledger_call_seconds_count") {
			c.timed[s.Labels["op"]] += s.Value
		}
		for _, s := range m.Samples("bulkhead_ledger_calls_total") {
			c.calls[s.Labels["op"]] += s.Value
			if r := s.Labels["result"]; r != "ok" {
				c.failed += s.Value
			}
		}
	}
	return c
}

// ledgerCost is the ledger's cost between two readings of a stack of
// replicas daemons; nil if either reading lacks the ledger's figures or
// the window served nothing.
func ledgerCost(replicas int, a, b reading, requests int64) *LedgerCost {
	if a.ledger == nil || b.ledger == nil || a.redis == nil || b.redis == nil || requests <= 0 {
		return nil
	}
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 {
		return nil
	}
	n := float64(requests)
	c := &LedgerCost{Replicas: replicas, PerRequest: map[string]float64{}, TicksPerSecond: map[string]float64{},
		Failed: int64(math.Round(b.ledger.failed - a.ledger.failed)), Commands: map[string]int64{}, CallMs: map[string]float64{}}
	for _, op := range admission.Ops() {
		if timed := b.ledger.timed[string(op)] - a.ledger.timed[string(op)]; timed > 0 {
			c.CallMs[string(op)] = round3((b.ledger.seconds[string(op)] - a.ledger.seconds[string(op)]) / timed * 1000)
		}
		d := b.ledger.calls[string(op)] - a.ledger.calls[string(op)]
		switch {
		case slices.Contains(requestOps, op):
			c.PerRequest[string(op)] = round6(d / n)
		case d > 0 || op == admission.OpState || op == admission.OpReplicas:
			// Periodic; the capacity leases' calls only when they are on.
			c.TicksPerSecond[string(op)] = round3(d / secs)
		}
		if op == admission.OpLease && d > 0 {
			c.PerRequest[string(op)] = round6(d / n)
		}
	}
	// One bulkhead is configured: a state call is one script, and so is a
	// capacity lease's call.
	var ticks float64
	for _, op := range []admission.Op{admission.OpState, admission.OpReplicas, admission.OpLease} {
		ticks += b.ledger.calls[string(op)] - a.ledger.calls[string(op)]
	}
	c.TickScripts = int64(math.Round(ticks))
	var scripts, inside, usec int64
	for cmd, calls := range b.redis.Calls {
		d := calls - a.redis.Calls[cmd]
		if d == 0 {
			continue
		}
		c.Commands[cmd] = d
		switch {
		case redisproc.IsScript(cmd):
			scripts += d
			usec += b.redis.Usec[cmd] - a.redis.Usec[cmd]
		case !slices.Contains(outsideScripts, cmd):
			inside += d
		}
	}
	c.EvalCalls = c.Commands["eval"]
	c.ScriptsPerRequest = round6(float64(scripts-c.TickScripts) / n)
	c.InScriptsPerRequest = round6(float64(inside) / n)
	c.ScriptUsPerRequest = round3(float64(usec) / n)
	c.CPUMsPer1k = round3(float64(b.redis.CPU-a.redis.CPU) / float64(time.Millisecond) / (n / 1000))
	return c
}

// round6 rounds a figure of calls per request: with capacity leases they
// fall to 1e-4 and below, which round3 would show as 0.
func round6(v float64) float64 { return math.Round(v*1e6) / 1e6 }
