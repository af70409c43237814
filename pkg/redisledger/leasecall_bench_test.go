package redisledger

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/redisproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// BenchmarkLeaseRound measures what one replica's lease-loop round of n
// bulkheads costs Redis (a real redis-server, INFO commandstats and cpu):
// one lease call per bulkhead, one after the other (sequential, the loop
// before batches); the same calls in one pipeline (pipelined); and calls
// of up to k bulkheads each, pipelined (batch-k: the lease loop sends
// leaseBatch). For scale, state: the ticker's look at the same bulkheads
// (the state script per bulkhead, pipelined), which each replica also
// runs each tick. An op is one round; redis-cpu-us is the server's CPU
// (used_cpu_sys + used_cpu_user) per round, script-us the time
// commandstats gives the scripts per round, calls the scripts per round,
// and us/call how long one call ran in Redis.
//
//	go test -run '^$' -bench LeaseRound -benchtime 1000x ./pkg/redisledger/
func BenchmarkLeaseRound(b *testing.B) {
	for _, tc := range []struct {
		mode string
		n, k int // bulkheads, bulkheads per call
	}{{"sequential", 51, 1}, {"pipelined", 51, 1}, {"batch-16", 51, 16}, {"batch-32", 51, 32}, {"batch-64", 51, 64}, {"batch-64", 64, 64}, {"state", 51, 1}} {
		b.Run(fmt.Sprintf("%s/%d", tc.mode, tc.n), func(b *testing.B) {
			srv := testkit.StartRedis(b)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer rdb.Close()
			l := New(rdb, Config{Prefix: "bench:", Replica: "a"}, &fakeObs{}, newFakeRec(), nil)
			ctx := context.Background()
			names := make([]string, tc.n)
			for i := range names {
				names[i] = fmt.Sprintf("bulkhead-%03d", i)
			}
			head := []any{"a", 3000, 0, 3000}
			run := func(seq int, part []string) scriptRun {
				r := scriptRun{args: append([]any(nil), head...)}
				for _, name := range part {
					r.keys = append(r.keys, l.keysOf(name)...)
					r.args = append(r.args, 1, seq, 4, 1, 2, 0, 100, "0", 1)
				}
				return r
			}
			round := func(seq int) {
				switch tc.mode {
				case "sequential":
					for _, name := range names {
						r := run(seq, []string{name})
						if err := l.sc.lease.Run(ctx, rdb, r.keys, r.args...).Err(); err != nil {
							b.Fatal(err)
						}
					}
				case "state":
					runs := make([]scriptRun, len(names))
					for i, name := range names {
						runs[i] = scriptRun{keys: l.keysOf(name), args: l.stateArgs()}
					}
					for _, c := range l.pipeRuns(ctx, l.sc.state, runs) {
						if err := c.Err(); err != nil {
							b.Fatal(err)
						}
					}
				default:
					var runs []scriptRun
					for i := 0; i < len(names); i += tc.k {
						runs = append(runs, run(seq, names[i:min(i+tc.k, len(names))]))
					}
					for _, c := range l.pipeRuns(ctx, l.sc.lease, runs) {
						if err := c.Err(); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			for _, sc := range []*redis.Script{l.sc.lease, l.sc.state} {
				if err := sc.Load(ctx, rdb).Err(); err != nil {
					b.Fatal(err)
				}
			}
			round(1) // every lease granted
			info := func() redisproc.Info {
				text, err := rdb.Info(ctx, "commandstats", "cpu").Result()
				if err != nil {
					b.Fatal(err)
				}
				i, err := redisproc.ParseInfo(text)
				if err != nil {
					b.Fatal(err)
				}
				return i
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			before := info()
			b.ResetTimer()
			for i := range b.N {
				round(i + 2)
			}
			b.StopTimer()
			after := info()
			per := float64(b.N)
			b.ReportMetric(float64((after.CPU-before.CPU).Microseconds())/per, "redis-cpu-us/op")
			b.ReportMetric(float64(after.ScriptUsec())/per, "script-us/op")
			b.ReportMetric(float64(after.Scripts())/per, "calls/op")
			b.ReportMetric(float64(after.ScriptUsec())/float64(max(after.Scripts(), 1)), "us/call")
		})
	}
}
