package testbed

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"
)

func TestTCPEchoCountsOpenConnections(t *testing.T) {
	e, err := NewTCPEcho()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", e.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "ping\n" {
			t.Fatalf("echo = %q, %v", line, err)
		}
	}
	if err := e.WaitOpen(ctx, 3); err != nil {
		t.Fatal(err)
	}
	conns[0].Close()
	if err := e.WaitOpen(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if e.Max() != 3 || e.Accepted() != 3 {
		t.Fatalf("max %d, accepted %d; want 3, 3", e.Max(), e.Accepted())
	}
	// Close ends the connections still open, and every goroutine.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if e.Open() != 0 {
		t.Fatalf("%d open after Close", e.Open())
	}
	for _, c := range conns[1:] {
		c.Close()
	}
}
