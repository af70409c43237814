package testkit

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of one address, which a test
// turns into a network fault and heals: Hang holds every byte (TCP keeps
// them; nothing is refused, as on a link gone silent), Refuse closes every
// connection and each new one, Delay slows each chunk of bytes each way,
// Pass forwards again (bytes held by Hang flow on). Safe for concurrent use.
type Proxy struct {
	Addr   string // where clients connect
	target string
	ln     net.Listener
	wg     sync.WaitGroup // accept and every link's goroutines
	delay  atomic.Int64   // added to each chunk forwarded, ns

	mu     sync.Mutex
	refuse bool
	closed bool
	open   chan struct{} // closed while bytes flow
	links  map[*link]struct{}
}

// link is one client connection and, once bytes flow, its upstream.
type link struct {
	c    net.Conn
	done chan struct{} // closed by end

	mu    sync.Mutex
	u     net.Conn
	ended bool
}

// end closes both sides, once.
func (l *link) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.ended = true
	close(l.done)
	l.c.Close()
	if l.u != nil {
		l.u.Close()
	}
}

// attach gives l its upstream; false (u closed) when l has ended.
func (l *link) attach(u net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		u.Close()
		return false
	}
	l.u = u
	return true
}

// StartProxy forwards a loopback port to target until the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, open: make(chan struct{}), links: map[*link]struct{}{}}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Hang stops forwarding in both directions, on open and new connections,
// without closing any.
func (p *Proxy) Hang() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

// Refuse closes every connection and each new one until Pass.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	p.refuse = true
	links := p.snapshot()
	p.mu.Unlock()
	for _, l := range links {
		l.end()
	}
}

// Delay adds d before each chunk is forwarded, each way (0: none); Pass
// does not reset it.
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

// Pass forwards again.
func (p *Proxy) Pass() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = false
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	links := p.snapshot()
	p.mu.Unlock()
	p.ln.Close()
	for _, l := range links {
		l.end()
	}
	p.wg.Wait()
}

// snapshot lists the links; p.mu is held.
func (p *Proxy) snapshot() []*link {
	out := make([]*link, 0, len(p.links))
	for l := range p.links {
		out = append(out, l)
	}
	return out
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		l := &link{c: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.refuse || p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// serve connects l to the target once bytes flow, and pumps both ways
// until either side ends.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer func() {
		l.end()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	if !p.wait(l) {
		return
	}
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !l.attach(u) {
		return
	}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(l, u, l.c) }()
	go func() { defer pumps.Done(); p.pump(l, l.c, u) }()
	pumps.Wait()
}

// pump copies src to dst while bytes flow, holding them while p hangs.
func (p *Proxy) pump(l *link, dst, src net.Conn) {
	defer l.end()
	buf := make([]byte, 32<<10)
	for p.wait(l) {
		n, err := src.Read(buf)
		if d := time.Duration(p.delay.Load()); n > 0 && d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				return
			}
		}
		if n > 0 && p.wait(l) {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait blocks while p hangs; false once l has ended.
func (p *Proxy) wait(l *link) bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-l.done:
		return false
	}
}
