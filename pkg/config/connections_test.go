package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

func TestParseConnections(t *testing.T) {
	t.Parallel()
	c, err := Parse("bulkhead.yaml", []byte(`
authz: {default_priority: best_effort}
bulkheads:
  postgres: {max_concurrent: 20, max_queue: 10, max_wait: 500ms, connections: {ports: [6432, 5432], priority: critical}}
  redis: {max_concurrent: 5, connections: {ports: [6379]}}
  catalog: {max_concurrent: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	pg := c.Bulkheads["postgres"]
	if pg.Kind() != KindConnections || !slices.Equal(pg.Connections.Ports, []int{5432, 6432}) || pg.Connections.Priority != bulkhead.Critical {
		t.Errorf("postgres = %v %+v", pg.Kind(), pg.Connections)
	}
	if r := c.Bulkheads["redis"]; r.Connections == nil || r.Connections.Priority != bulkhead.BestEffort {
		t.Errorf("redis connections = %+v, want the default priority", r.Connections)
	}
	if k := c.Bulkheads["catalog"].Kind(); k != KindRequests {
		t.Errorf("catalog kind = %v", k)
	}
}

func TestParseConnectionsInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yaml, want string }{
		{"no ports", "bulkheads: {pg: {max_concurrent: 1, connections: {}}}\n",
			"bulkheads.pg.connections.ports: is required: the listener ports whose connections the bulkhead counts"},
		{"not a mapping", "bulkheads: {pg: {max_concurrent: 1, connections: 5432}}\n",
			"bulkheads.pg.connections: must be a mapping (got 5432)"},
		{"ports not a list", "bulkheads: {pg: {max_concurrent: 1, connections: {ports: 5432}}}\n",
			"bulkheads.pg.connections.ports: must be a list of ports (got 5432)"},
		{"empty ports", "bulkheads: {pg: {max_concurrent: 1, connections: {ports: []}}}\n",
			"bulkheads.pg.connections.ports: must name at least one port"},
		{"port out of range", "bulkheads: {pg: {max_concurrent: 1, connections: {ports: [0, 70000]}}}\n",
			"bulkheads.pg.connections.ports[0]: must be a port in 1..65535 (got 0)"},
		{"port not a number", "bulkheads: {pg: {max_concurrent: 1, connections: {ports: [pg]}}}\n",
			`bulkheads.pg.connections.ports[0]: must be an integer (got "pg")`},
		{"port twice", "bulkheads: {pg: {max_concurrent: 1, connections: {ports: [5432, 5432]}}}\n",
			"bulkheads.pg.connections.ports[1]: is listed twice (got 5432)"},
		{"port in two bulkheads", "bulkheads: {a: {max_concurrent: 1, connections: {ports: [5432]}}, b: {max_concurrent: 1, connections: {ports: [5432]}}}\n",
			"bulkheads.b.connections.ports: port 5432 is already bulkheads.a's"},
		{"bad priority", "bulkheads: {pg: {max_concurrent: 1, connections: {ports: [1], priority: urgent}}}\n",
			`bulkheads.pg.connections.priority: must be critical, normal or best_effort (got "urgent")`},
		{"unknown field", "bulkheads: {pg: {max_concurrent: 1, connections: {ports: [1], port: 2}}}\n",
			"bulkheads.pg.connections.port: unknown field (known: ports, priority)"},
		{"tenant", "authz: {tenant_header: x-t}\nbulkheads: {pg: {max_concurrent: 2, tenant: {max_concurrent: 1}, connections: {ports: [1]}}}\n",
			"bulkheads.pg.tenant: a connections bulkhead has no tenants (a network Check carries no headers)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("bulkhead.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			if !slices.ContainsFunc(strings.Split(err.Error(), "\n"), func(l string) bool {
				return strings.HasPrefix(l, "bulkhead.yaml: "+tt.want)
			}) {
				t.Errorf("error\n%v\nhas no line starting %q", err, tt.want)
			}
		})
	}
}
