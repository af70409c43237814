package config

import (
	"fmt"
	"maps"
	"slices"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// Connections makes a bulkhead count TCP connections instead of HTTP
// requests: Envoy's network ext_authz filter asks for a permit when a
// connection opens, and the TCP proxy's access log gives it back when the
// connection closes.
//
// A network Check carries no route and no headers: what names the
// connection's bulkhead is the port Envoy accepted it on (the Check's
// destination address, the listener's own port), so each guarded listener
// has its own port. Its class is Priority unless the Envoy's node metadata
// label permit.LabelPriority (bulkhead_priority, sent as the Check's destination labels) names
// another: a label is set by the operator in the Envoy's bootstrap, never by
// a client.
type Connections struct {
	// Ports are the listener ports whose connections this bulkhead counts,
	// sorted; each 1..65535 and in one bulkhead only.
	Ports []int
	// Priority is the class of its connections; authz.default_priority
	// when the file sets none.
	Priority bulkhead.Priority
}

// Kind is what a bulkhead counts.
type Kind string

// The kinds of bulkhead.
const (
	KindRequests    Kind = "requests"
	KindConnections Kind = "connections"
)

// Kind says what the bulkhead counts: connections when it has a
// connections section, else requests.
func (b Bulkhead) Kind() Kind {
	if b.Connections != nil {
		return KindConnections
	}
	return KindRequests
}

var connectionsFields = []string{"ports", "priority"}

// connections decodes the connections section of the bulkhead at path.
func (d *decoder) connections(path string, raw any, prio bulkhead.Priority) *Connections {
	path += ".connections"
	fields, ok := d.mapping(path, raw)
	if !ok {
		return nil
	}
	c := &Connections{Priority: prio}
	if fields["ports"] == nil {
		d.ps.add(path+".ports", "is required: the listener ports whose connections the bulkhead counts", "")
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		key, v := path+"."+k, fields[k]
		if v == nil {
			continue
		}
		switch k {
		case "ports":
			c.Ports = d.ports(key, v)
		case "priority":
			s, ok := d.strOK(key, v)
			if !ok {
				continue
			}
			p, err := bulkhead.ParsePriority(s)
			d.check(key, v, err == nil, "must be critical, normal or best_effort")
			c.Priority = p
		default:
			d.ps.add(key, unknownField(k, connectionsFields), "")
		}
	}
	return c
}

// ports decodes a non-empty list of distinct ports, sorted.
func (d *decoder) ports(key string, v any) []int {
	list, ok := v.([]any)
	if !ok {
		d.check(key, v, false, "must be a list of ports")
		return nil
	}
	d.check(key, v, len(list) > 0, "must name at least one port")
	var out []int
	for i, item := range list {
		ik := fmt.Sprintf("%s[%d]", key, i)
		n := d.integer(ik, item)
		switch {
		case d.ps.bad[ik]:
		case n < 1 || n > 65535:
			d.ps.add(ik, "must be a port in 1..65535", d.got(ik, item))
		case slices.Contains(out, n):
			d.ps.add(ik, "is listed twice", d.got(ik, item))
		default:
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// connectionBulkheads checks the rules across connection bulkheads: a port
// names one bulkhead, and a connection has no tenant (no header to name one).
func (d *decoder) connectionBulkheads(c *Config) {
	owner := map[int]string{}
	for _, name := range slices.Sorted(maps.Keys(c.Bulkheads)) {
		b := c.Bulkheads[name]
		if b.Connections == nil {
			continue
		}
		path := "bulkheads." + name
		if b.Tenant != nil {
			d.ps.add(path+".tenant", "a connections bulkhead has no tenants (a network Check carries no headers)", "")
		}
		for _, p := range b.Connections.Ports {
			if other, dup := owner[p]; dup {
				d.ps.add(path+".connections.ports", fmt.Sprintf("port %d is already bulkheads.%s's", p, other), "")
				continue
			}
			owner[p] = name
		}
	}
}
