package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// errResponse is a response the client cannot frame.
var errResponse = errors.New("bad response")

// requestTimeout bounds one request; a request that takes longer is an error.
const requestTimeout = 10 * time.Second

// conn is one keep-alive HTTP/1.1 connection to Envoy that sends the same
// GET over and over. Like the upstream it is a bare loop rather than
// net/http, to leave the machine's cores to the proxy under test. Not safe
// for concurrent use: each load worker owns one.
type conn struct {
	addr string
	req  []byte
	c    net.Conn
	br   *bufio.Reader
}

func newConn(addr, path string) *conn {
	return &conn{addr: addr, req: []byte("GET " + path + " HTTP/1.1\r\nhost: bench\r\nuser-agent: bulkhead-bench\r\n\r\n")}
}

// do sends the request and reads the response, (re)connecting first if
// needed. It returns the status code; on an error the connection is closed
// so that the next do starts afresh.
func (h *conn) do(ctx context.Context) (int, error) {
	if h.c == nil {
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp", h.addr)
		if err != nil {
			return 0, err
		}
		h.c, h.br = c, bufio.NewReaderSize(c, 4096)
	}
	_ = h.c.SetDeadline(time.Now().Add(requestTimeout))
	status, keep, err := h.roundTrip()
	if err != nil || !keep {
		h.close()
	}
	return status, err
}

func (h *conn) roundTrip() (status int, keepAlive bool, err error) {
	if _, err := h.c.Write(h.req); err != nil {
		return 0, false, err
	}
	line, err := h.br.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, false, fmt.Errorf("%w: status line %q", errResponse, line)
	}
	if status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, false, fmt.Errorf("%w: status line %q", errResponse, line)
	}
	length, keepAlive := -1, true
	for {
		line, err := h.br.ReadSlice('\n')
		if err != nil {
			return status, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return status, false, fmt.Errorf("%w: header line %q", errResponse, line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("content-length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return status, false, fmt.Errorf("%w: content-length %q", errResponse, value)
			}
		case bytes.EqualFold(name, []byte("connection")):
			keepAlive = !bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			return status, false, fmt.Errorf("%w: transfer-encoding %q (the upstream sends content-length)", errResponse, value)
		}
	}
	if length < 0 {
		return status, false, fmt.Errorf("%w: no content-length", errResponse)
	}
	if _, err := h.br.Discard(length); err != nil {
		return status, false, err
	}
	return status, keepAlive, nil
}

func (h *conn) close() {
	if h.c != nil {
		h.c.Close()
		h.c, h.br = nil, nil
	}
}
