package testkit

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo serves a line echo on loopback until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line on c and reads its echo within d.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestProxyHangRefusePass(t *testing.T) {
	p := StartProxy(t, echo(t))
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Delay(100 * time.Millisecond)
	start := time.Now()
	if got, err := roundTrip(c, r, 5*time.Second); err != nil || got != "ping\n" || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("delayed 100ms each way: %q, %v after %v", got, err, time.Since(start))
	}
	p.Delay(0)
	p.Hang()
	if got, err := roundTrip(c, r, 200*time.Millisecond); err == nil {
		t.Fatalf("hanging proxy answered %q", got)
	}
	p.Pass()
	// The line held by the hang flows on, then the next one.
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "ping\n" {
		t.Fatalf("held bytes after Pass: %q, %v", got, err)
	}
	if got, err := roundTrip(c, r, 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("after Pass: %q, %v", got, err)
	}
	p.Refuse()
	if _, err := roundTrip(c, r, 5*time.Second); err == nil {
		t.Fatal("a connection survived Refuse")
	}
	if n, err := net.Dial("tcp", p.Addr); err == nil {
		nr := bufio.NewReader(n)
		if _, err := roundTrip(n, nr, 5*time.Second); err == nil {
			t.Fatal("a new connection was served while refusing")
		}
		n.Close()
	}
	p.Pass()
	n, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if got, err := roundTrip(n, bufio.NewReader(n), 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("a new connection after Pass: %q, %v", got, err)
	}
}
