package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// upstream is the benchmark's HTTP/1.1 server: every request gets the same
// small 200 after a fixed delay, or after the delay its path names
// (delayPath: the heartbeat phase's 1 ms and 2 s requests). It is a bare keep-alive loop rather than
// net/http so that it takes as little of the machine's two cores as it can
// (the proxy, not the upstream, is under test). It measures its own service
// time, the "upstream's own duration" of the release lag.
type upstream struct {
	ln    net.Listener
	delay time.Duration

	served  atomic.Int64
	busyNs  atomic.Int64 // sum of service times
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup // the accept loop and the connection loops
	lastErr error
}

var upstreamResponse = []byte("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\nok\n")

// errBadRequest is a request the upstream cannot frame.
var errBadRequest = errors.New("upstream: bad request")

func newUpstream(delay time.Duration) (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	u := &upstream{ln: ln, delay: delay, conns: map[net.Conn]struct{}{}}
	u.wg.Add(1)
	go u.accept()
	return u, nil
}

// Addr is the listener's host:port.
func (u *upstream) Addr() string { return u.ln.Addr().String() }

// Stats returns the requests served and the sum of their service times.
func (u *upstream) Stats() (served int64, busy time.Duration) {
	return u.served.Load(), time.Duration(u.busyNs.Load())
}

func (u *upstream) accept() {
	defer u.wg.Done()
	for {
		c, err := u.ln.Accept()
		if err != nil {
			return // closed
		}
		u.mu.Lock()
		if u.closed {
			u.mu.Unlock()
			c.Close()
			return
		}
		u.conns[c] = struct{}{}
		u.wg.Add(1)
		u.mu.Unlock()
		go u.serve(c)
	}
}

func (u *upstream) serve(c net.Conn) {
	defer u.wg.Done()
	defer func() {
		u.mu.Lock()
		delete(u.conns, c)
		u.mu.Unlock()
		c.Close()
	}()
	br := bufio.NewReaderSize(c, 4096)
	for {
		delay, named, err := readRequest(br)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				u.mu.Lock()
				u.lastErr = err
				u.mu.Unlock()
			}
			return
		}
		if !named {
			delay = u.delay
		}
		start := time.Now()
		if delay > 0 {
			time.Sleep(delay) // the upstream's work, not synchronisation
		}
		u.busyNs.Add(int64(time.Since(start)))
		u.served.Add(1)
		if _, err := c.Write(upstreamResponse); err != nil {
			return
		}
	}
}

// delayPrefix starts a path that names the upstream's service time for the
// request: delayPath(2*time.Second) is "/delay/2s".
const delayPrefix = "/delay/"

func delayPath(d time.Duration) string { return delayPrefix + d.String() }

// requestDelay reads the service time a request line names (GET
// /delay/2s HTTP/1.1); false when it names none.
func requestDelay(line []byte) (time.Duration, bool) {
	f := bytes.Fields(line)
	if len(f) != 3 {
		return 0, false
	}
	v, ok := bytes.CutPrefix(f[1], []byte(delayPrefix))
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(string(v))
	if err != nil || d < 0 {
		return 0, false
	}
	return d, true
}

// readRequest consumes one request: the head, then a content-length body
// (Envoy forwards GETs without one). Chunked bodies are not expected. It
// returns the service time the request line names, if any.
func readRequest(br *bufio.Reader) (delay time.Duration, named bool, err error) {
	first := true
	length := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if first && len(line) == 0 {
				return 0, false, io.EOF
			}
			return 0, false, fmt.Errorf("%w: %w", errBadRequest, err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if first {
			first = false
			delay, named = requestDelay(line)
			continue
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, false, fmt.Errorf("%w: header line %q", errBadRequest, line)
		}
		switch {
		case bytes.EqualFold(name, []byte("content-length")):
			if length, err = strconv.Atoi(string(bytes.TrimSpace(value))); err != nil || length < 0 {
				return 0, false, fmt.Errorf("%w: content-length %q", errBadRequest, value)
			}
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			return 0, false, fmt.Errorf("%w: transfer-encoding %q", errBadRequest, value)
		}
	}
	_, err = br.Discard(length)
	return delay, named, err
}

// Close stops accepting, closes every connection and waits for their loops.
// It returns the last framing error seen, if any.
func (u *upstream) Close() error {
	u.mu.Lock()
	u.closed = true
	for c := range u.conns {
		c.Close()
	}
	u.mu.Unlock()
	err := u.ln.Close()
	u.wg.Wait()
	u.mu.Lock()
	defer u.mu.Unlock()
	return errors.Join(err, u.lastErr)
}
