package meshsim

import (
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// pingFrame is an HTTP/2 PING (type 6, no flags, stream 0) with 8 bytes of
// opaque data.
var pingFrame = []byte{0, 0, 8, 6, 0, 0, 0, 0, 0, 'm', 'e', 's', 'h', 's', 'i', 'm', 0}

// pinger sends an HTTP/2 PING on each of its connections every interval,
// as Envoy's connection_keepalive does on its connection to the daemon
// (the shipped configs: each second). grpc-go's own client keepalive
// cannot ping more often than every 10 s, so the PING is written into the
// connection's byte stream between two of grpc-go's frames: a pingConn
// follows the frame boundaries of what grpc-go writes. grpc-go ignores the
// ACK (its BDP estimation is off: the windows are static). Safe for
// concurrent use.
type pinger struct {
	mu     sync.Mutex
	slices [pingSlices]map[*pingConn]struct{} // the connections, by the tick that pings them
	added  int                                // connections added: the next one's slice
	sent   int64
}

// pingSlices is how many ticks an interval has: each pings its slice of
// the connections. Real Envoys each ping on a timer of their own, so their
// PINGs reach the daemon spread over the interval; 200 slices (5 ms apart
// at the shipped 1 s) make each tick's burst 1/200 of them, 50 PINGs at
// 10,000 connections. With 20, bursts of 500 PINGs every 50 ms kept a
// daemon on one core busy for about 20 ms at a time, and the Checks that
// came meanwhile waited (docs/performance.md, "The daemon on a core of
// its own").
const pingSlices = 200

func newPinger() *pinger {
	p := &pinger{}
	for i := range p.slices {
		p.slices[i] = map[*pingConn]struct{}{}
	}
	return p
}

// run pings every connection once per interval, spread over the interval
// in slices, until ctx ends.
func (p *pinger) run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval / pingSlices)
	defer tick.Stop()
	for slice := 0; ; slice = (slice + 1) % pingSlices {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p.pingSlice(slice)
	}
}

// pingSlice pings the connections of one slice.
func (p *pinger) pingSlice(slice int) {
	p.mu.Lock()
	batch := make([]*pingConn, 0, len(p.slices[slice]))
	for c := range p.slices[slice] {
		batch = append(batch, c)
	}
	p.mu.Unlock()
	for _, c := range batch {
		if c.ping() {
			p.mu.Lock()
			p.sent++
			p.mu.Unlock()
		}
	}
}

func (p *pinger) add(c *pingConn) {
	p.mu.Lock()
	c.slice = p.added % pingSlices
	p.added++
	p.slices[c.slice][c] = struct{}{}
	p.mu.Unlock()
}

func (p *pinger) remove(c *pingConn) {
	p.mu.Lock()
	delete(p.slices[c.slice], c)
	p.mu.Unlock()
}

// pingConn is a connection that knows where the HTTP/2 frames it writes
// begin, so that a PING can be written between two of them.
type pingConn struct {
	net.Conn
	p        *pinger
	slice    int
	closeOne sync.Once

	mu          sync.Mutex // serializes writes, guards the frame state
	prefaceLeft int        // bytes of the client preface still to come
	hdr         [9]byte    // the frame header being written
	hn          int        // bytes of hdr written
	payloadLeft int        // bytes of the current frame's payload still to come
	pending     bool       // a PING waits for the next frame boundary
	started     bool       // the preface was written
}

// clientPrefaceLen is the length of HTTP/2's client connection preface.
const clientPrefaceLen = 24

func newPingConn(nc net.Conn, p *pinger) *pingConn {
	return &pingConn{Conn: nc, p: p, prefaceLeft: clientPrefaceLen}
}

// atBoundary reports whether the next byte written starts a frame.
func (c *pingConn) atBoundary() bool {
	return c.started && c.prefaceLeft == 0 && c.hn == 0 && c.payloadLeft == 0
}

func (c *pingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	from := 0
	for i := 0; i < len(b); {
		switch {
		case c.prefaceLeft > 0:
			n := min(c.prefaceLeft, len(b)-i)
			c.prefaceLeft -= n
			i += n
			c.started = true
		case c.payloadLeft > 0:
			n := min(c.payloadLeft, len(b)-i)
			c.payloadLeft -= n
			i += n
		default:
			if c.hn == 0 && c.pending {
				if _, err := c.Conn.Write(b[from:i]); err != nil {
					return from, err
				}
				from = i
				c.pending = false
				if _, err := c.Conn.Write(pingFrame); err != nil {
					return from, err
				}
			}
			n := copy(c.hdr[c.hn:], b[i:])
			c.hn += n
			i += n
			if c.hn == len(c.hdr) {
				c.hn, c.payloadLeft = 0, int(c.hdr[0])<<16|int(c.hdr[1])<<8|int(c.hdr[2])
			}
		}
	}
	n, err := c.Conn.Write(b[from:])
	return from + n, err
}

// ping writes a PING now if no frame is half written, else at the next
// frame boundary; it reports whether it was written now.
func (c *pingConn) ping() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.atBoundary() {
		c.pending = c.started
		return false
	}
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := c.Conn.Write(pingFrame)
	_ = c.SetWriteDeadline(time.Time{})
	return err == nil
}

func (c *pingConn) Close() error {
	c.closeOne.Do(func() { c.p.remove(c) })
	return c.Conn.Close()
}

// dial returns a client connection to target as one Envoy worker's
// connection to the daemon: HTTP/2, static windows (no BDP pings: Envoy
// sends none), reconnecting on demand with a short backoff (Envoy's
// connection pool connects again for the next request; its cluster's
// connect_timeout is 1 s), pinged by p.
func dial(target string, p *pinger) (*grpc.ClientConn, error) {
	var d net.Dialer
	return grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			c := newPingConn(nc, p)
			p.add(c)
			return c, nil
		}),
		grpc.WithInitialWindowSize(1<<20),
		grpc.WithInitialConnWindowSize(1<<20),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}),
	)
}
