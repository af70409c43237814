package accesslog

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// DefaultMaxNodes caps the nodes tracked at once (WithMaxNodes).
const DefaultMaxNodes = 10000

// NodeReleaser ends every lease of a node; *permit.Memory is one.
type NodeReleaser interface {
	ReleaseNode(node string, src permit.Source) int
}

// NodeRecorder receives what Nodes measures; *metrics.Metrics is one.
type NodeRecorder interface {
	// NodeLost counts a node declared lost and the permits it held.
	NodeLost(permits int)
	// NodesTracked reports how many nodes are tracked now.
	NodesTracked(n int)
}

// Nodes tells live Envoy nodes from lost ones and reclaims the permits of
// lost ones (see the package documentation). It is safe for concurrent use;
// Run is its one goroutine.
type Nodes struct {
	ledger NodeReleaser
	grace  time.Duration
	clk    clock.Clock
	rec    NodeRecorder
	log    *slog.Logger
	max    int
	epoch  time.Time // times are kept as durations since epoch (monotonic with a real clock)

	mu     sync.Mutex
	nodes  map[string]*node // every tracked node
	silent map[string]*node // tracked nodes with no open stream
	full   bool             // the cap was hit (logged once per episode)
	index  sync.Map         // string -> *node: lock-free lookups for Heard
	wake   chan struct{}    // a node fell silent: Run re-arms its timer
}

// node is one tracked Envoy node.
type node struct {
	streams atomic.Int32 // open access-log streams; written with Nodes.mu held
	// heard is when the node was last known alive while it had no stream:
	// when its last stream closed, or a later Check. Nanoseconds since epoch.
	heard atomic.Int64
}

// NodesOption configures Nodes.
type NodesOption func(*Nodes)

// WithNodesClock sets the clock of the grace period (default: real).
func WithNodesClock(c clock.Clock) NodesOption { return func(n *Nodes) { n.clk = c } }

// WithNodesLogger sets the logger (default: discard).
func WithNodesLogger(l *slog.Logger) NodesOption { return func(n *Nodes) { n.log = l } }

// WithNodesRecorder sets the recorder (default: none).
func WithNodesRecorder(r NodeRecorder) NodesOption { return func(n *Nodes) { n.rec = r } }

// WithMaxNodes caps the nodes tracked at once; a stream of a node beyond the
// cap is not tracked (its node's permits then end by lease). m < 1 keeps the
// default.
func WithMaxNodes(m int) NodesOption {
	return func(n *Nodes) {
		if m >= 1 {
			n.max = m
		}
	}
}

// NewNodes returns a tracker that releases, through ledger with source
// permit.NodeLost, the permits of a node unheard of for grace (> 0).
func NewNodes(ledger NodeReleaser, grace time.Duration, opts ...NodesOption) *Nodes {
	n := &Nodes{
		ledger: ledger,
		grace:  grace,
		clk:    clock.Real{},
		rec:    nopNodeRecorder{},
		log:    slog.New(slog.DiscardHandler),
		max:    DefaultMaxNodes,
		nodes:  map[string]*node{},
		silent: map[string]*node{},
		wake:   make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(n)
	}
	n.epoch = n.clk.Now()
	return n
}

func (n *Nodes) now() int64 { return int64(n.clk.Now().Sub(n.epoch)) }

// Opened records an access-log stream of node id. It reports whether the
// stream is tracked; only then must the caller call Closed when it ends.
// Invalid ids, and new ids beyond the cap, are not tracked.
func (n *Nodes) Opened(id string) bool {
	if n == nil || !permit.ValidNodeID(id) {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	nd := n.nodes[id]
	if nd == nil {
		if len(n.nodes) >= n.max {
			if !n.full {
				n.full = true
				n.log.Warn("too many Envoy nodes to track: new nodes' permits end by lease only", "max", n.max)
			}
			return false
		}
		n.full = false
		nd = &node{}
		n.nodes[id] = nd
		n.index.Store(id, nd)
		n.rec.NodesTracked(len(n.nodes))
	}
	nd.streams.Add(1)
	delete(n.silent, id)
	return true
}

// Closed records the end of a stream for which Opened returned true. When it
// was the node's last, the node's grace period starts.
func (n *Nodes) Closed(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	nd := n.nodes[id]
	if nd == nil || nd.streams.Add(-1) > 0 {
		return
	}
	nd.heard.Store(n.now())
	n.silent[id] = nd
	select {
	case n.wake <- struct{}{}:
	default: // Run already has a wake-up pending
	}
}

// Heard records a sign of life of node id other than a stream: a Check. It
// postpones the reclamation of a node that has no stream now, and costs one
// lock-free lookup (no write) while the node has streams. Unknown ids are
// ignored.
func (n *Nodes) Heard(id string) {
	if n == nil || id == "" {
		return
	}
	v, ok := n.index.Load(id)
	if !ok {
		return
	}
	nd := v.(*node)
	if nd.streams.Load() > 0 {
		return
	}
	now := n.now()
	for {
		old := nd.heard.Load()
		if old >= now || nd.heard.CompareAndSwap(old, now) {
			return
		}
	}
}

// Tracked returns how many nodes are tracked and how many of them have no
// open stream.
func (n *Nodes) Tracked() (nodes, silent int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.nodes), len(n.silent)
}

// Run reclaims the permits of lost nodes until ctx ends; then it returns
// nil. It is meant to run in one goroutine per Nodes: one timer, armed for
// the earliest end of a grace period, serves every node.
func (n *Nodes) Run(ctx context.Context) error {
	for {
		next, ok := n.reclaimDue()
		var t clock.Timer
		var fire <-chan time.Time
		if ok {
			t = n.clk.NewTimer(next)
			fire = t.C()
		}
		select {
		case <-ctx.Done():
			if t != nil {
				t.Stop()
			}
			return nil
		case <-n.wake:
		case <-fire:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// reclaimDue forgets every silent node whose grace period is over and
// releases its permits. It returns how long until the next grace period
// ends, and false when no node is silent.
func (n *Nodes) reclaimDue() (time.Duration, bool) {
	now := n.now()
	grace := int64(n.grace)
	var lost []lostNode
	next, have := int64(0), false
	n.mu.Lock()
	for id, nd := range n.silent {
		due := nd.heard.Load() + grace
		if due > now {
			if !have || due-now < next {
				next, have = due-now, true
			}
			continue
		}
		delete(n.silent, id)
		delete(n.nodes, id)
		n.index.Delete(id)
		lost = append(lost, lostNode{id: id, silent: time.Duration(now - nd.heard.Load())})
	}
	if len(lost) > 0 {
		n.rec.NodesTracked(len(n.nodes))
	}
	n.mu.Unlock()
	// Outside the lock: a Check of this node racing with the release may
	// have its new permit released too (ReleaseNode's contract). Such a
	// Check comes from a node silent for the whole grace period.
	for _, l := range lost {
		k := n.ledger.ReleaseNode(l.id, permit.NodeLost)
		n.rec.NodeLost(k)
		n.log.Info("Envoy node lost: its permits are released", "node", l.id, "silent", l.silent, "permits", k)
	}
	return time.Duration(next), have
}

type lostNode struct {
	id     string
	silent time.Duration
}

type nopNodeRecorder struct{}

func (nopNodeRecorder) NodeLost(int)     {}
func (nopNodeRecorder) NodesTracked(int) {}
