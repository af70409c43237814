package server

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestNoBDPPings: the gRPC listener's windows are static (grpcWindow), so
// a stream of access-log messages gets no PING from the daemon, which each
// Envoy worker would have to wake up for and answer. grpc-go's BDP
// estimation, on by default, sends one as soon as data arrives.
//
// Raw HTTP/2: the client opens an access-log stream, sends messages, then
// a PING of its own. The daemon handles frames in order, so a BDP ping
// (queued when the first DATA frame is read) would reach the client before
// the ACK of its PING.
func TestNoBDPPings(t *testing.T) {
	rn := start(t, parseConfig(t, baseYAML))
	c, err := net.DialTimeout("tcp", rn.addrs["grpc"], 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "bulkhead"},
		{":path", "/envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	// An empty StreamAccessLogsMessage per DATA frame: gRPC's 5-byte prefix.
	empty := []byte{0, 0, 0, 0, 0}
	steps := []func() error{
		func() error { return fr.WriteSettings() },
		func() error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hdr.Bytes(), EndHeaders: true})
		},
	}
	for range 20 {
		steps = append(steps, func() error { return fr.WriteData(1, false, empty) })
	}
	steps = append(steps, func() error { return fr.WritePing(false, [8]byte{'b', 'u', 'l', 'k', 'h', 'e', 'a', 'd'}) })
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the daemon's frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				t.Fatalf("the daemon sent a PING %q while access-log messages arrived (BDP estimation is on)", f.Data[:])
			}
			return // the ACK of the client's PING, and no PING before it
		case *http2.GoAwayFrame, *http2.RSTStreamFrame:
			t.Fatalf("unexpected %v", f)
		}
	}
}
