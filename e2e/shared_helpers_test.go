//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// replicaStack is several daemon replicas sharing a ledger on a real Redis,
// behind one or more Envoys whose bulkhead cluster lists every replica.
// Its embedded stack points at replica 0 for metrics (the bulkhead gauges
// are global with the Redis ledger) and at Envoy 0 for requests.
type replicaStack struct {
	*stack
	ledgerYAML string // the ledger section
	ledgerOf   func(i int) string
	yaml       string // the bulkheads and the rest
	dir        string
	replicas   []*replica
	envoys     []*envoyproc.Proc
	bases      []string // http://LISTENER of each Envoy
	rdb        redis.UniversalClient
	envLog     testkit.SyncBuffer
	params     envoy.Params // every Envoy's, but its node id and port
}

// replica is one daemon process.
type replica struct {
	proc             *daemonProc
	grpc, http, admn string
	log              testkit.SyncBuffer
}

type replicaSpec struct {
	ledger string // the ledger section of the config
	// ledgerOf, if set, is replica i's ledger section instead (each its
	// own link to Redis, through a proxy the test breaks).
	ledgerOf func(i int) string
	yaml     string // the rest, without listen and log
	replicas int
	envoys   int
	envoy    func(*envoy.Params)
	rdb      redis.UniversalClient // reads the ledger's keys
}

func startReplicaStack(t *testing.T, spec replicaSpec) *replicaStack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs := &replicaStack{
		// A grant whose answer a timeout lost is given back when Redis
		// answers, or at its lease's end (leases.heartbeat_ttl, 3 s), and
		// the global gauges refresh each second.
		stack:      &stack{t: t, up: map[string]*testbed.Upstream{}, limits: map[string]int{}, settle: 5 * time.Second},
		ledgerYAML: spec.ledger, ledgerOf: spec.ledgerOf, yaml: spec.yaml, dir: t.TempDir(), rdb: spec.rdb,
	}
	rs.limits = limitsOf(t, rs.configText(0, "127.0.0.1:0"))
	rs.up = startUpstreams(t)
	for i := range spec.replicas {
		rs.replicas = append(rs.replicas, rs.startReplica(ctx, i, "127.0.0.1:0"))
	}
	t.Cleanup(func() {
		for i, r := range rs.replicas {
			if r.proc != nil {
				rs.stopReplica(i)
			}
			if t.Failed() {
				t.Logf("replica %d log:\n%s", i, tail(r.log.String(), 4000))
			}
		}
	})
	rs.point(0)
	params := envoy.Params{Bulkhead: endpoint(t, rs.replicas[0].grpc),
		Routes: envoy.DemoRoutes(endpoint(t, rs.up["catalog"].Addr()), endpoint(t, rs.up["auth"].Addr()), endpoint(t, rs.up["orders"].Addr()))}
	for _, r := range rs.replicas[1:] {
		params.BulkheadReplicas = append(params.BulkheadReplicas, endpoint(t, r.grpc))
	}
	if spec.envoy != nil {
		spec.envoy(&params)
	}
	rs.params = params
	for i := range spec.envoys {
		e, base := rs.startEnvoy(ctx, i, 0)
		rs.envoys = append(rs.envoys, e)
		rs.bases = append(rs.bases, base)
	}
	t.Cleanup(func() {
		for _, e := range rs.envoys {
			sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
			if err := e.Stop(sctx); err != nil {
				t.Errorf("envoy stop: %v", err)
			}
			c()
		}
		if t.Failed() {
			t.Logf("envoy log:\n%s", tail(rs.envLog.String(), 4000))
		}
	})
	rs.envoy, rs.base = rs.envoys[0], rs.bases[0]
	rs.waitStrict(ctx)
	t.Cleanup(rs.checkInvariant)
	return rs
}

// startEnvoy starts Envoy i, its listener on port (0: any), and returns it
// with its base URL.
func (rs *replicaStack) startEnvoy(ctx context.Context, i, port int) (*envoyproc.Proc, string) {
	t := rs.t
	t.Helper()
	p := rs.params
	p.NodeID = fmt.Sprintf("front-proxy-%d", i)
	p.ListenerPort = port
	bootstrap, err := envoy.Render(p)
	if err != nil {
		t.Fatal(err)
	}
	e, err := envoyproc.Start(ctx, envoyproc.Options{Binary: envoyBin, ConfigYAML: bootstrap, Concurrency: 2, Stderr: &rs.envLog})
	if err != nil {
		t.Fatalf("envoy %d: %v\n%s", i, err, tail(rs.envLog.String(), 4000))
	}
	addr, err := e.ListenerAddr(ctx, envoy.DefaultListenerName)
	if err != nil {
		t.Fatal(err)
	}
	return e, "http://" + addr
}

// restartEnvoy starts Envoy i again on its listener's port (after Kill).
func (rs *replicaStack) restartEnvoy(ctx context.Context, i int) {
	rs.t.Helper()
	_, port := hostPort(rs.bases[i])
	rs.envoys[i], _ = rs.startEnvoy(ctx, i, port)
}

// configText is replica i's configuration.
func (rs *replicaStack) configText(i int, grpc string) string {
	ledger := rs.ledgerYAML
	if rs.ledgerOf != nil {
		ledger = rs.ledgerOf(i)
	}
	return fmt.Sprintf("listen: {grpc: %q, http: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\nlog: {level: debug}\n%s\n%s",
		grpc, ledger, rs.yaml)
}

// startReplica starts replica i with its gRPC listener on grpc.
func (rs *replicaStack) startReplica(ctx context.Context, i int, grpc string) *replica {
	t := rs.t
	t.Helper()
	cfgPath := filepath.Join(rs.dir, fmt.Sprintf("bulkhead-%d.yaml", i))
	if err := os.WriteFile(cfgPath, []byte(rs.configText(i, grpc)), 0o600); err != nil {
		t.Fatal(err)
	}
	addrPath := filepath.Join(rs.dir, fmt.Sprintf("addr-%d-%d.json", i, time.Now().UnixNano()))
	r := &replica{}
	if i < len(rs.replicas) {
		r = rs.replicas[i] // a restart keeps the log
	}
	d, addrs := startDaemonProc(t, ctx, cfgPath, addrPath, &r.log)
	r.proc = d
	r.grpc, r.http, r.admn = addrs["grpc"], addrs["http"], addrs["admin"]
	return r
}

// point makes the embedded stack read metrics from replica i.
func (rs *replicaStack) point(i int) {
	r := rs.replicas[i]
	rs.grpcAddr, rs.httpAddr, rs.adminAddr = r.grpc, r.http, r.admn
}

func (rs *replicaStack) stopReplica(i int) {
	r := rs.replicas[i]
	d := r.proc
	r.proc = nil
	d.stop(rs.t)
}

// killReplica SIGKILLs replica i and points the stack at another.
func (rs *replicaStack) killReplica(i int) {
	rs.t.Helper()
	r := rs.replicas[i]
	d := r.proc
	r.proc = nil
	d.kill(rs.t)
	for j, o := range rs.replicas {
		if o.proc != nil {
			rs.point(j)
			break
		}
	}
}

// waitStrict waits until every live replica's ledger is strict and admits
// (a fresh bulkhead's recovery window in Redis has passed).
func (rs *replicaStack) waitStrict(ctx context.Context) {
	rs.t.Helper()
	for i, r := range rs.replicas {
		if r.proc == nil {
			continue
		}
		poll(rs.t, ctx, fmt.Sprintf("replica %d strict", i), func() bool {
			m, err := testbed.Scrape(ctx, "http://"+r.http+"/metrics")
			if err != nil {
				return false
			}
			v, ok := m.Value("bulkhead_ledger_state", map[string]string{"state": "strict"})
			return ok && v == 1
		})
	}
	// And the recovery window of each bulkhead, new in Redis, has passed.
	poll(rs.t, ctx, "recovery windows over", func() bool {
		m := rs.metrics()
		for name := range rs.limits {
			if v, ok := m.Value("bulkhead_ledger_recovering", map[string]string{"dependency": name}); !ok || v != 0 {
				return false
			}
		}
		return true
	})
}

// inUse is a bulkhead's permits in use as Redis counts them (prefix
// "bulkhead:"): per request, plus what the capacity leases had in use at
// their replicas' last renewals; -1 when Redis cannot say (or counts
// neither).
func (rs *replicaStack) inUse(ctx context.Context, name string) int {
	v, err := rs.rdb.HMGet(ctx, "bulkhead:{"+name+"}:s", "inuse", "lused").Result()
	if err != nil {
		return -1
	}
	n := -1
	for _, x := range v {
		if s, ok := x.(string); ok {
			m, _ := strconv.Atoi(strings.TrimSpace(s))
			n = max(n, 0) + m
		}
	}
	return n
}

// hostPort splits an http://host:port base.
func hostPort(base string) (string, int) {
	h, p, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	n, _ := strconv.Atoi(p)
	return h, n
}

// waitBackStrict waits until every live replica has been unavailable (it
// counted a transition to it) and is strict again, and returns when the
// last one was.
func (rs *replicaStack) waitBackStrict(ctx context.Context) time.Time {
	rs.t.Helper()
	for i, r := range rs.replicas {
		if r.proc == nil {
			continue
		}
		poll(rs.t, ctx, fmt.Sprintf("replica %d unavailable, then strict", i), func() bool {
			m, err := testbed.Scrape(ctx, "http://"+r.http+"/metrics")
			if err != nil {
				return false
			}
			down, _ := m.Value("bulkhead_ledger_transitions_total", map[string]string{"to": "unavailable"})
			up, _ := m.Value("bulkhead_ledger_state", map[string]string{"state": "strict"})
			return down >= 1 && up == 1
		})
	}
	return time.Now()
}
