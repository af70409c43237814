package meshsim

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2"
)

// TestPingerSlices: the pinger spreads its connections evenly over its
// slices, one tick pings one slice, and a closed connection leaves its
// slice.
func TestPingerSlices(t *testing.T) {
	p := newPinger()
	const n = 10*pingSlices + 7
	outs := make([]*bytes.Buffer, n)
	conns := make([]*pingConn, n)
	for i := range conns {
		outs[i] = &bytes.Buffer{}
		conns[i] = newPingConn(&bufConn{w: outs[i]}, p)
		p.add(conns[i])
		if _, err := conns[i].Write([]byte(http2.ClientPreface)); err != nil {
			t.Fatal(err)
		}
		outs[i].Reset()
	}
	for i, s := range p.slices {
		if want := 10 + min(1, max(0, 7-i)); len(s) != want {
			t.Fatalf("slice %d holds %d connections, want %d", i, len(s), want)
		}
	}
	p.pingSlice(3)
	for i, out := range outs {
		if pinged, want := bytes.Equal(out.Bytes(), pingFrame), i%pingSlices == 3; pinged != want {
			t.Errorf("connection %d (slice %d): pinged %v by slice 3's tick", i, i%pingSlices, pinged)
		}
	}
	if p.sent != 11 {
		t.Errorf("sent %d PINGs, want 11", p.sent)
	}
	conns[3].p.remove(conns[3])
	if len(p.slices[3]) != 10 {
		t.Errorf("slice 3 holds %d after a removal, want 10", len(p.slices[3]))
	}
}
