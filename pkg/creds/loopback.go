package creds

import (
	"net"
	"net/netip"
)

// IsLoopback reports whether addr, "host:port" or a bare host, is on the
// loopback interface: "localhost" or a loopback IP (127.0.0.0/8, ::1, or
// one of them mapped into IPv6). An empty host (every interface), another
// name or an unparsable address is not. It is the one rule both for a
// listen address (may it go without credentials?) and for a caller's
// remote address (is it local?).
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
