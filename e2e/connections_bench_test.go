//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"net"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/envoy"
)

// BenchmarkConnectionsThroughEnvoy measures short TCP connections (open,
// one line echoed, close) through the real Envoy with and without a
// connection bulkhead, in one run against one Envoy: the listener plain has
// no ext_authz and no access log; guarded takes a permit per connection
// (one Check) and gives it back (one end entry). Both reach the same echo
// upstream. The cost per connection is the ratio of the two conn/s:
//
//	go test -tags e2e -run '^$' -bench ConnectionsThroughEnvoy -count 5 ./e2e/ | benchstat -col /listener -
func BenchmarkConnectionsThroughEnvoy(b *testing.B) {
	port := map[string]int{"plain": endpoint(b, freePort(b)).Port, "guarded": endpoint(b, freePort(b)).Port}
	echo := newEcho(b)
	startStack(b, fmt.Sprintf("bulkheads:\n  catalog: {max_concurrent: 5}\n  pg: {max_concurrent: 1000, connections: {ports: [%d]}}\n",
		port["guarded"]), func(p *envoy.Params) {
		p.TCPListeners = []envoy.TCPListener{
			{Name: "plain", Port: port["plain"], Upstream: endpoint(b, echo.Addr()), Unguarded: true},
			{Name: "guarded", Port: port["guarded"], Upstream: endpoint(b, echo.Addr())},
		}
	})
	rates := map[string]float64{}
	for _, listener := range []string{"plain", "guarded"} {
		b.Run("listener="+listener, func(b *testing.B) {
			addr := fmt.Sprintf("127.0.0.1:%d", port[listener])
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := echoOnce(addr); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			rates[listener] = float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rates[listener], "conn/s")
		})
	}
	if rates["plain"] > 0 {
		b.Logf("connections per second: plain %.0f, guarded %.0f, guarded/plain %.2f",
			rates["plain"], rates["guarded"], rates["guarded"]/rates["plain"])
	}
}

// echoOnce opens a connection to addr, has one line echoed and closes it.
func echoOnce(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	if line != "ping\n" {
		return fmt.Errorf("echo %q", line)
	}
	return nil
}
