package shares

import (
	"slices"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// node is one Envoy (one node id): its shares, the layers it was sent and
// what it acknowledged and reported.
type node struct {
	id       string
	conns    int // its RTDS streams
	lrsConns int // its LRS streams
	// duplicate: two streams of one kind at once, two Envoy processes
	// under one node id (or one whose old stream lingers). Their reports
	// cannot be told apart, so its shares are withdrawn (strict) and given
	// back by time alone: a tail after the last layer that granted one.
	duplicate     bool
	lastShareSent time.Time
	wakeC         chan struct{} // a new layer to send (capacity 1)
	lrsWakeC      chan struct{} // its load reports should come faster or slower (capacity 1)
	fast          bool          // what lrsWakeC last said: shrinking

	shares map[string]*share // by unit: bulkhead, or its critical share (criticalUnit)

	inflight map[string]int // by share cluster: the last load report
	dropped  map[string]int // by share cluster: the concurrency of its overflows in that report's interval (turnedAway)
	// recent: by share cluster, the demand (in flight + overflows) of the
	// last few reports: a share is sized from their peak, so that one
	// report taken in a quiet instant does not shrink it.
	recent  map[string]*[recentReports]int
	reports uint64 // load reports received

	// sent are the layers sent that the Envoy may run with: the one it
	// acknowledged last that bounds its use (see bound) and every later one.
	sent     []layer
	encoded  encodedLayer // the last layer of sent, encoded (by its seq)
	lastSent time.Time    // the last response sent (a layer, new or re-sent)
	// waiting is when the oldest response not yet answered was sent (zero:
	// none). An Envoy that does not answer for half the TTL stalls: it is
	// sent nothing more, so that its layer's end can be known.
	waiting time.Time
	// isStalled: waiting for longer than half the TTL, as of the last round
	// or response; resend: the next response must be a whole layer (the
	// Envoy may have dropped the last one).
	isStalled, resend bool
	// now and interval: the time of the last round or event, and the load
	// report interval (for settledIndex).
	now      time.Time
	interval time.Duration
}

// share is one Envoy's share of one bulkhead.
type share struct {
	held    []bulkhead.Permit // the permits that back it
	limit   int               // the max_requests the next layer says
	strict  bool              // the next layer routes through ext_authz
	cluster string
}

// layer is one runtime layer sent.
type layer struct {
	seq      uint64
	limits   map[string]int    // by unit: the share, -1 for strict
	clusters map[string]string // by unit: its share cluster
	acked    bool
	reports  uint64    // node.reports when it was acknowledged
	ackAt    time.Time // when
}

func newNode(id string, interval time.Duration) *node {
	return &node{id: id, interval: interval, wakeC: make(chan struct{}, 1), lrsWakeC: make(chan struct{}, 1), shares: map[string]*share{}, inflight: map[string]int{}, dropped: map[string]int{}, recent: map[string]*[recentReports]int{}}
}

func (n *node) share(name string) *share {
	s := n.shares[name]
	if s == nil {
		s = &share{}
		n.shares[name] = s
	}
	return s
}

func (n *node) wake() {
	select {
	case n.wakeC <- struct{}{}:
	default:
	}
}

// recentReports is how many reports a share's demand is the peak of.
const recentReports = 4

// demand is the peak demand (requests in flight plus overflows) of
// cluster over n's last recentReports reports.
func (n *node) demand(cluster string) int {
	d := 0
	if r := n.recent[cluster]; r != nil {
		for _, v := range r {
			d = max(d, v)
		}
	}
	return d
}

// applied is the share of bulkhead name in the last layer n acknowledged:
// what its circuit breaker runs with (0 for none, or strict). A layer
// acknowledged late in a report's interval may say more than the share
// the interval's overflows ran into: it then overstates their peak,
// which only sizes a share larger.
func (n *node) applied(name string) int {
	for i := len(n.sent) - 1; i >= 0; i-- {
		if n.sent[i].acked {
			return max(n.sent[i].limits[name], 0)
		}
	}
	return 0
}

// shrinking reports whether a share of n holds more permits than its
// limit: permits wait for its reports to come back.
func (n *node) shrinking() bool {
	for _, s := range n.shares {
		if len(s.held) > max(s.limit, 0) {
			return true
		}
	}
	return false
}

// wakeLRS tells n's LRS stream when shrinking changed.
func (n *node) wakeLRS() {
	if f := n.shrinking(); f != n.fast {
		n.fast = f
		select {
		case n.lrsWakeC <- struct{}{}:
		default:
		}
	}
}

// live reports whether the Envoy is connected and answering.
func (n *node) live() bool { return n.conns > 0 && !n.isStalled }

// stalled reports whether a response to n has gone unanswered for half
// the TTL at now.
func (n *node) stalled(now time.Time, ttl time.Duration) bool {
	return !n.waiting.IsZero() && now.Sub(n.waiting) > ttl/2
}

// dirty reports whether the shares differ from the last layer sent.
func (n *node) dirty() bool {
	if len(n.sent) == 0 {
		return len(n.shares) > 0
	}
	last := n.sent[len(n.sent)-1]
	if len(last.limits) != len(n.shares) {
		return true
	}
	for name, s := range n.shares {
		l, ok := last.limits[name]
		if !ok || l != s.wire() {
			return true
		}
	}
	return false
}

// wire is the share as a layer says it: its limit, or -1 for strict.
func (s *share) wire() int {
	if s.strict {
		return -1
	}
	return s.limit
}

// bound returns how many requests of bulkhead name (share cluster
// cluster) the Envoy may have in flight from now on, and ok: the largest
// share among the last layer it acknowledged at least two load reports
// ago and every later layer, or the requests that report (or a later
// one) found in flight, whichever is more. An Envoy applies a layer
// before it acknowledges it, and under a circuit breaker of N its
// requests in flight only grow up to N and above N only fall: a report
// generated after the acknowledgement bounds what runs from then on. Two
// reports after it, one was generated after it. ok is false when no
// layer qualifies (keep everything).
func (n *node) bound(name, cluster string) (keep int, ok bool) {
	i := n.settledIndex()
	if i < 0 {
		return 0, false
	}
	keep = n.inflight[cluster]
	for _, l := range n.sent[i:] {
		keep = max(keep, l.limits[name])
	}
	return keep, true
}

// settledIndex is the index in sent of the last acknowledged layer with
// two load reports and a report interval since, or -1. (A report reaches
// the daemon within an interval of being generated: the second report
// received after the acknowledgement was generated after it.)
func (n *node) settledIndex() int {
	for i := len(n.sent) - 1; i >= 0; i-- {
		if l := n.sent[i]; l.acked && n.reports >= l.reports+2 && !n.now.Before(l.ackAt.Add(n.interval)) {
			return i
		}
	}
	return -1
}

// lastSeq is the sequence number of the last layer sent to n (0: none,
// or an adopted one).
func (n *node) lastSeq() uint64 {
	if len(n.sent) == 0 {
		return 0
	}
	return n.sent[len(n.sent)-1].seq
}

// trim forgets the layers before the settled one.
func (n *node) trim() {
	if i := n.settledIndex(); i > 0 {
		n.sent = slices.Delete(n.sent, 0, i)
	}
}

// clusters maps each bulkhead n has a share of to its share cluster.
func (n *node) clusters() map[string]string {
	out := make(map[string]string, len(n.shares))
	for name, s := range n.shares {
		out[name] = s.cluster
	}
	return out
}

// held returns how many permits n holds for its share u.
func (n *node) held(u string) int {
	if s := n.shares[u]; s != nil {
		return len(s.held)
	}
	return 0
}

// reported reports whether a load report of n named cluster: the Envoy has
// it (Envoy leaves a cluster it does not have out of its reports, and
// names one it has even with no load: checked against Envoy 1.40).
func (n *node) reported(cluster string) bool {
	_, ok := n.recent[cluster]
	return ok
}

// heldTotal returns every permit n holds.
func (n *node) heldTotal() []bulkhead.Permit {
	var out []bulkhead.Permit
	for _, s := range n.shares {
		out = append(out, s.held...)
	}
	return out
}
