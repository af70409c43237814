package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"golang.org/x/sync/errgroup"
)

// TCPEcho is a TCP server on 127.0.0.1 that echoes what each connection
// sends and counts its own open connections exactly (current and maximum),
// so that tests check a connection bulkhead where it matters: at the
// dependency. It is safe for concurrent use; Close stops every goroutine it
// started.
type TCPEcho struct {
	ln net.Listener
	g  errgroup.Group // the accept loop and one goroutine per connection

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	max      int
	accepted int
	closed   bool
	changed  chan struct{} // closed and replaced whenever the open count changes
}

// NewTCPEcho listens on a free loopback port and serves until Close.
func NewTCPEcho() (*TCPEcho, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &TCPEcho{ln: ln, conns: map[net.Conn]struct{}{}, changed: make(chan struct{})}
	e.g.Go(e.accept)
	return e, nil
}

// Addr is the server's host:port.
func (e *TCPEcho) Addr() string { return e.ln.Addr().String() }

// Open is the number of connections open now.
func (e *TCPEcho) Open() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.conns)
}

// Max is the most connections ever open at once.
func (e *TCPEcho) Max() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.max
}

// Accepted is the number of connections accepted so far.
func (e *TCPEcho) Accepted() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.accepted
}

// WaitOpen waits until exactly n connections are open.
func (e *TCPEcho) WaitOpen(ctx context.Context, n int) error {
	return waitUntil(ctx, func() (<-chan struct{}, bool, bool) {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.changed, len(e.conns) == n, e.closed
	}, func() string { return fmt.Sprintf("tcp echo: waiting for %d open connections (have %d)", n, e.Open()) })
}

// Close stops accepting, closes every open connection and waits for the
// server's goroutines.
func (e *TCPEcho) Close() error {
	err := e.ln.Close()
	e.mu.Lock()
	e.closed = true
	for c := range e.conns {
		_ = c.Close()
	}
	e.notifyLocked()
	e.mu.Unlock()
	_ = e.g.Wait()
	return err
}

func (e *TCPEcho) accept() error {
	for {
		c, err := e.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			_ = c.Close()
			return nil
		}
		e.conns[c] = struct{}{}
		e.accepted++
		e.max = max(e.max, len(e.conns))
		e.notifyLocked()
		e.mu.Unlock()
		e.g.Go(func() error {
			_, _ = io.Copy(c, c) // echo until the peer closes (or Close does)
			e.mu.Lock()
			delete(e.conns, c)
			e.notifyLocked()
			e.mu.Unlock()
			return c.Close()
		})
	}
}

func (e *TCPEcho) notifyLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}
