package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// NamePattern is the pattern every bulkhead name matches: lowercase letters,
// digits, '_', '.' and '-', starting and ending with a letter or digit, at
// most 63 characters.
const NamePattern = `^[a-z0-9]([a-z0-9_.-]{0,61}[a-z0-9])?$`

var nameRE = regexp.MustCompile(NamePattern)

// ValidName reports whether name may name a bulkhead.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// Field names of one bulkhead and of its reserve, in the order documented.
var (
	bulkheadFields = []string{"max_concurrent", "max_queue", "max_wait", "lease_ttl", "reserve", "enforce", "queue", "codel", "circuit_breaker", "tenant", "connections", "shares"}
	reserveFields  = []string{"critical", "normal"}
	codelFields    = []string{"target", "interval"}
	tenantFields   = []string{"max_concurrent", "max_queue", "max_wait"}
)

// mapping returns v as a map with string keys, recording a problem at path
// if v is not a mapping or has a key that is not a string. A null is an
// empty mapping.
func (d *decoder) mapping(path string, v any) (map[string]any, bool) {
	switch m := v.(type) {
	case nil:
		return nil, true
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, val := range m {
			s, ok := k.(string)
			if !ok {
				d.ps.add(join(path, fmt.Sprint(k)), "key is not a string (quote it)", show(k))
				continue
			}
			out[s] = val
		}
		return out, true
	}
	d.ps.add(path, "must be a mapping", show(v))
	return nil, false
}

// join appends a field name to a dotted path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// section is a mapping of settings outside bulkheads: its field names in
// the order of scalars, and for each field nil (a scalar) or its own section.
type section struct {
	names []string
	kids  map[string]*section
}

// settingsTree builds the sections from the dotted keys of scalars.
func settingsTree() *section {
	root := &section{kids: map[string]*section{}}
	for _, s := range scalars {
		n := root
		parts := strings.Split(s.key, ".")
		for i, p := range parts {
			kid, seen := n.kids[p]
			if !seen {
				if i < len(parts)-1 {
					kid = &section{kids: map[string]*section{}}
				}
				n.names = append(n.names, p)
				n.kids[p] = kid
			}
			n = kid
		}
	}
	return root
}

// splitRoot checks the document's structure outside bulkheads and returns
// those settings as nested maps holding only known, exactly spelt keys (what
// viper will see), plus the raw bulkheads value.
func (d *decoder) splitRoot(root any) (settings map[string]any, bulkheads any) {
	top, ok := d.mapping("", root)
	if !ok {
		return nil, nil
	}
	tree := settingsTree()
	sections := append(append([]string(nil), tree.names...), "bulkheads")
	settings = map[string]any{}
	for _, name := range slices.Sorted(maps.Keys(top)) {
		if name == "bulkheads" {
			bulkheads = top[name]
			continue
		}
		sec, known := tree.kids[name]
		if !known || sec == nil {
			d.ps.add(name, unknownField(name, sections), "")
			continue
		}
		if kept, ok := d.section(name, top[name], sec); ok {
			settings[name] = kept
		}
	}
	return settings, bulkheads
}

// section returns the known fields of the mapping raw at path that are set
// (null means unset), recording a problem for each unknown one.
func (d *decoder) section(path string, raw any, sec *section) (map[string]any, bool) {
	body, ok := d.mapping(path, raw)
	if !ok {
		return nil, false
	}
	kept := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(body)) {
		key, v := join(path, k), body[k]
		kid, known := sec.kids[k]
		switch {
		case key == "admin.token":
			d.ps.add(key, "unknown field: the token is never written in this file; "+
				"use admin.token_file or the environment variable "+envAdminToken, "")
		case key == "leases.node_grace":
			d.ps.add(key, "removed: heartbeat leases (leases.heartbeat_interval, leases.heartbeat_ttl) reclaim a dead "+
				"Envoy's permits within seconds, whatever its node id; delete this setting", "")
		case !known:
			d.ps.add(key, unknownField(k, sec.names), "")
		case v == nil:
		case kid != nil:
			if sub, ok := d.section(key, v, kid); ok {
				kept[k] = sub
			}
		default:
			kept[k] = v
		}
	}
	return kept, true
}

// bulkheads decodes the bulkheads mapping. Bulkheads without lease_ttl get
// defaultTTL, connections without a priority prio. Names are checked here;
// limits are checked by validate.
func (d *decoder) bulkheads(raw any, defaultTTL time.Duration, prio bulkhead.Priority) map[string]Bulkhead {
	m, _ := d.mapping("bulkheads", raw)
	out := make(map[string]Bulkhead, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		path := "bulkheads." + name
		switch {
		case ValidName(name):
		case ValidName(strings.ToLower(name)):
			d.ps.add(path, "bulkhead names are case-sensitive and must be lowercase, matching "+NamePattern, show(name))
		default:
			d.ps.add(path, "bulkhead name must match "+NamePattern, show(name))
		}
		out[name] = d.bulkhead(path, m[name], defaultTTL, prio)
	}
	return out
}

// bulkhead decodes one bulkhead and checks its settings.
func (d *decoder) bulkhead(path string, raw any, defaultTTL time.Duration, prio bulkhead.Priority) Bulkhead {
	b := Bulkhead{LeaseTTL: defaultTTL}
	fields, ok := d.mapping(path, raw)
	if !ok {
		return b
	}
	s := &b.Settings
	var tenant any
	if fields["max_concurrent"] == nil {
		d.ps.add(path+".max_concurrent", "is required", "")
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		key, v := path+"."+k, fields[k]
		if v == nil {
			continue // unset
		}
		switch k {
		case "max_concurrent":
			s.MaxConcurrent = d.integer(key, v)
		case "max_queue":
			s.MaxQueue = d.integer(key, v)
		case "max_wait":
			s.MaxWait = d.duration(key, v)
		case "lease_ttl":
			b.LeaseTTL = d.duration(key, v)
			d.positive(key, v, b.LeaseTTL)
		case "reserve":
			s.ReserveCritical, s.ReserveNormal = d.reserve(key, v)
		case "enforce":
			s.DryRun = !d.boolean(key, v)
		case "queue":
			s.Queue = d.queueDiscipline(key, v)
		case "codel":
			s.CoDelTarget, s.CoDelInterval = d.codel(key, v)
		case "circuit_breaker":
			b.Breaker = d.breaker(key, v)
		case "tenant":
			tenant = v
		case "connections":
			b.Connections = d.connections(path, v, prio)
		case "shares":
			b.Shares = d.sharesSection(path, path[len("bulkheads."):], v)
		default:
			d.ps.add(key, unknownField(k, bulkheadFields), "")
		}
	}
	if s.Queue == bulkhead.CoDel {
		if fields["codel"] == nil {
			s.CoDelTarget, s.CoDelInterval = bulkhead.DefaultCoDelTarget, bulkhead.DefaultCoDelInterval
		}
	}
	d.settings(path, b)
	if tenant != nil {
		b.Tenant = d.tenant(path, tenant, b.Settings)
	}
	return b
}

// tenant decodes and checks the tenant template of the bulkhead at path,
// whose own settings are parent. It returns nil if the template is not a
// mapping.
func (d *decoder) tenant(path string, raw any, parent bulkhead.Settings) *bulkhead.Settings {
	limitKey := path + ".max_concurrent"
	path += ".tenant"
	fields, ok := d.mapping(path, raw)
	if !ok {
		return nil
	}
	t := &bulkhead.Settings{MaxWait: parent.MaxWait, DryRun: parent.DryRun} // a dry run covers its tenants
	if fields["max_concurrent"] == nil {
		d.ps.add(path+".max_concurrent", "is required", "")
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		key, v := path+"."+k, fields[k]
		if v == nil {
			continue // unset
		}
		switch k {
		case "max_concurrent":
			t.MaxConcurrent = d.integer(key, v)
			if d.ps.bad[limitKey] {
				d.rule(key, v, t.MaxConcurrent >= 1, "must be at least 1")
			} else {
				d.rule(key, v, t.MaxConcurrent >= 1 && t.MaxConcurrent <= parent.MaxConcurrent,
					fmt.Sprintf("must be in 1..%d, the bulkhead's max_concurrent", parent.MaxConcurrent))
			}
		case "max_queue":
			t.MaxQueue = d.integer(key, v)
			d.rule(key, v, t.MaxQueue >= 0, "must not be negative")
		case "max_wait":
			t.MaxWait = d.duration(key, v)
			d.rule(key, v, t.MaxWait >= 0, "must not be negative")
		default:
			d.ps.add(key, unknownField(k, tenantFields), "")
		}
	}
	return t
}

// reserve decodes a bulkhead's reserve mapping.
func (d *decoder) reserve(path string, raw any) (critical, normal float64) {
	m, _ := d.mapping(path, raw)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		key, v := path+"."+k, m[k]
		switch {
		case v == nil:
		case k == "critical":
			critical = d.float(key, v)
		case k == "normal":
			normal = d.float(key, v)
		default:
			d.ps.add(key, unknownField(k, reserveFields), "")
		}
	}
	return critical, normal
}

// queueDiscipline decodes a bulkhead's queue: fifo or codel.
func (d *decoder) queueDiscipline(key string, v any) bulkhead.QueueDiscipline {
	s, ok := d.strOK(key, v)
	q, err := bulkhead.ParseQueueDiscipline(s)
	if ok {
		d.check(key, v, err == nil, "must be fifo or codel")
	}
	return q
}

// codel decodes a bulkhead's codel mapping; a field left out gets its
// default (bulkhead.DefaultCoDel...).
func (d *decoder) codel(path string, raw any) (target, interval time.Duration) {
	target, interval = bulkhead.DefaultCoDelTarget, bulkhead.DefaultCoDelInterval
	m, _ := d.mapping(path, raw)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		key, v := path+"."+k, m[k]
		switch {
		case v == nil:
		case k == "target":
			target = d.duration(key, v)
		case k == "interval":
			interval = d.duration(key, v)
		default:
			d.ps.add(key, unknownField(k, codelFields), "")
		}
	}
	return target, interval
}

// positive records a problem at key unless t > 0.
func (d *decoder) positive(key string, v any, t time.Duration) {
	if t <= 0 && !d.ps.bad[key] {
		d.ps.add(key, "must be positive", d.got(key, v))
	}
}
