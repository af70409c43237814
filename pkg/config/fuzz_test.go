package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
)

func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("testdata", "example.yaml")); err == nil {
		f.Add(data)
	}
	for _, seed := range []string{
		"",
		"~",
		"- a\n",
		"listen: {grpc: 127.0.0.1:0, http: '[::1]:0'}\nlog: {level: debug, format: json}\n",
		"authz: {unknown_bulkhead: default, default_bulkhead: a}\nbulkheads: {a: {max_concurrent: 1}}\n",
		"bulkheads: {Catalog: {max_concurrent: 1}, a.b: {max_concurrent: 2, reserve: {critical: .nan}}}\n",
		"bulkheads: {c: {max_concurent: 1, max_wait: 5}}\n",
		"bulkheads: {1: {max_concurrent: 1}, c: , d: [1]}\n",
		"leases: {default_ttl: 0}\nlimits: {max_bulkheads: -1}\n",
		"a: &x [*x]\n",
		"a: 1\n---\nb: 2\n",
		"listen:\n  grpc: [a\n",
		"listen:\n  grpc: a\n  http: b\n   admin: c\n",
		"log: {level: info}\nbulkheads: {catalog: {max_concurrent: 1}\nauthz: {}\n",
		"log:\n\tlevel: \"é\" x\n",
		"? [a, b]\n: c\n",
		"listen: {admin: 0.0.0.0:1}\nadmin: {token_file: t}\n",
		"listen: {admin: '[::1]:0', grpc: '[::1]:0'}\nadmin: {tls: {cert_file: c, key_file: k, client_ca_file: ca}}\n",
		"admin: {token: x, tls: {cert_file: c, client_ca_file: ca}}\n",
		"admin: {tls: x, Token_File: 1}\nlimits: {max_tenants: 0}\n",
		"authz: {tenant_header: x-t}\nbulkheads: {c: {max_concurrent: 3, max_wait: 1s, tenant: {max_concurrent: 2, max_queue: 1}}}\n",
		"bulkheads: {c: {max_concurrent: 1, tenant: {max_concurrent: 5, reserve: 1, max_wait: -1s}}}\n",
		"bulkheads: {c: {max_concurrent: 1, enforce: false}, d: {max_concurrent: 2, enforce: [no]}, e: {enforce: 1}}\n",
		"bulkheads: {c: {max_concurrent: 1, circuit_breaker: {failure_ratio: .nan, min_requests: -1, window: 1ms, half_open_probes: x}}, d: {max_concurrent: 1, circuit_breaker: 3}}\n",
		"bulkheads: {c: {max_concurrent: 1, queue: codel, codel: {target: 0, interval: x}}, d: {max_concurrent: 1, queue: 7, codel: []}}\n",
		"authz: {tenant_header: x-bulkhead-priority}\nbulkheads: {c: {max_concurrent: x, tenant: }}\n",
		"authz: {trusted_priority_sources: [127.0.0.0/8, \"::1/128\", 10.1.2.3/8, 10.0.0.1, [x], 7]}\n",
		"authz: {trusted_priority_sources: \"127.0.0.0/8,,::/0\"}\nleases: {max_permits: 0}\n",
		"listen: {grpc_tls: {cert_file: c, client_ca_file: ca}, grpc_max_recv_bytes: 1e9, grpc_max_concurrent_streams: -1}\n",
		"listen: {grpc_tls: {key_file: k, cert: x}, grpc_max_recv_bytes: 65536, grpc_max_concurrent_streams: 100}\n",
		"bulkheads: {pg: {max_concurrent: 2, connections: {ports: [5432, 6432], priority: critical}}, r: {max_concurrent: 1, connections: {ports: [6379]}}}\n",
		"bulkheads: {a: {max_concurrent: 1, connections: {ports: [0, 5432, 5432, x, 1e9]}}, b: {max_concurrent: 1, connections: {ports: [5432], prio: 1}}}\n",
		"authz: {tenant_header: x-t}\nbulkheads: {pg: {max_concurrent: 2, tenant: {max_concurrent: 1}, connections: {ports: 5432, priority: [x]}}}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fuzz.yaml"
		c, err := Parse(name, data)
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned a Config and an error: %v", err)
			}
			switch {
			case errors.Is(err, ErrInvalid):
				for _, line := range strings.Split(err.Error(), "\n") {
					if !strings.HasPrefix(line, name+": ") {
						t.Fatalf("problem line %q does not name the source", line)
					}
				}
			case errors.Is(err, ErrSyntax):
				if !strings.HasPrefix(err.Error(), name+":") {
					t.Fatalf("syntax error %q does not name the source", err)
				}
				// A position names a line of data, quoted.
				var line, col int
				if n, _ := fmt.Sscanf(err.Error(), name+":%d:%d:", &line, &col); n == 2 {
					if line < 1 || line > strings.Count(string(data), "\n")+1 || col < 1 || !strings.Contains(err.Error(), "\n") {
						t.Fatalf("syntax error %q: line %d, column %d out of the input or not quoted", err, line, col)
					}
				}
			default:
				t.Fatalf("error %q wraps neither ErrInvalid nor ErrSyntax", err)
			}
			return
		}
		// A valid Config keeps every invariant validation promises.
		if len(c.Bulkheads) > c.Limits.MaxBulkheads {
			t.Fatalf("%d bulkheads over max_bulkheads %d", len(c.Bulkheads), c.Limits.MaxBulkheads)
		}
		for n, b := range c.Bulkheads {
			if !ValidName(n) {
				t.Fatalf("invalid name %q accepted", n)
			}
			if err := b.Settings.Validate(); err != nil {
				t.Fatalf("bulkhead %q: %v", n, err)
			}
			if b.LeaseTTL <= 0 {
				t.Fatalf("bulkhead %q: lease_ttl %v", n, b.LeaseTTL)
			}
		}
		for n, b := range c.Bulkheads {
			if b.Tenant == nil {
				continue
			}
			if c.Authz.TenantHeader == "" {
				t.Fatalf("bulkhead %q has a tenant template without authz.tenant_header", n)
			}
			if err := b.Tenant.Validate(); err != nil || b.Tenant.MaxConcurrent > b.Settings.MaxConcurrent {
				t.Fatalf("bulkhead %q: tenant %+v of %+v: %v", n, *b.Tenant, b.Settings, err)
			}
		}
		if c.Limits.MaxTenants < 1 || c.Limits.MaxTenants > MaxTenantsCeiling {
			t.Fatalf("max_tenants %d accepted", c.Limits.MaxTenants)
		}
		if !creds.IsLoopback(c.Listen.Admin) && !c.Admin.Secured() {
			t.Fatalf("admin listener %q accepted without a token or mTLS", c.Listen.Admin)
		}
		if tls := c.Admin.TLS; (tls.CertFile == "") != (tls.KeyFile == "") || tls.ClientCAFile != "" && tls.CertFile == "" {
			t.Fatalf("admin TLS %+v accepted", tls)
		}
		if tls := c.Listen.GRPCTLS; (tls.CertFile == "") != (tls.KeyFile == "") || tls.ClientCAFile != "" && tls.CertFile == "" {
			t.Fatalf("gRPC TLS %+v accepted", tls)
		}
		if l := c.Listen; l.GRPCMaxRecvBytes < MinGRPCMaxRecvBytes || l.GRPCMaxRecvBytes > MaxGRPCMaxRecvBytes ||
			l.GRPCMaxConcurrentStreams < MinGRPCMaxConcurrentStreams || l.GRPCMaxConcurrentStreams > MaxGRPCMaxConcurrentStreams ||
			c.Leases.MaxPermits < 1 || c.Leases.MaxPermits > MaxPermitsCeiling {
			t.Fatalf("bounds accepted: %+v, max_permits %d", l, c.Leases.MaxPermits)
		}
		for _, p := range c.Authz.TrustedPrioritySources {
			if !p.IsValid() || p != p.Masked() {
				t.Fatalf("trusted source %v accepted", p)
			}
		}
		if c.Admin.Token != "" {
			t.Fatal("Parse set the admin token")
		}
		if c.Authz.Unmatched == authz.UseDefault {
			if _, ok := c.Bulkheads[c.Authz.DefaultBulkhead]; !ok {
				t.Fatalf("default_bulkhead %q not configured", c.Authz.DefaultBulkhead)
			}
		}
	})
}
