package config

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
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
	bulkheadFields = []string{"max_concurrent", "max_queue", "max_wait", "lease_ttl", "reserve"}
	reserveFields  = []string{"critical", "normal"}
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

// sortedKeys returns m's keys in order, so problems come out deterministically.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// splitRoot checks the document's structure outside bulkheads and returns
// those settings as nested maps holding only known, exactly spelt keys (what
// viper will see), plus the raw bulkheads value.
func (d *decoder) splitRoot(root any) (settings map[string]any, bulkheads any) {
	top, ok := d.mapping("", root)
	if !ok {
		return nil, nil
	}
	known := map[string][]string{} // section -> its keys
	var sections []string
	for _, s := range scalars {
		sec, key, _ := strings.Cut(s.key, ".")
		if _, seen := known[sec]; !seen {
			sections = append(sections, sec)
		}
		known[sec] = append(known[sec], key)
	}
	sections = append(sections, "bulkheads")
	settings = map[string]any{}
	for _, sec := range sortedKeys(top) {
		if sec == "bulkheads" {
			bulkheads = top[sec]
			continue
		}
		keys, isSection := known[sec]
		if !isSection {
			d.ps.add(sec, unknownField(sec, sections), "")
			continue
		}
		body, ok := d.mapping(sec, top[sec])
		if !ok {
			continue
		}
		kept := map[string]any{}
		for _, k := range sortedKeys(body) {
			if !contains(keys, k) {
				d.ps.add(join(sec, k), unknownField(k, keys), "")
				continue
			}
			if body[k] != nil { // null means unset
				kept[k] = body[k]
			}
		}
		settings[sec] = kept
	}
	return settings, bulkheads
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// bulkheads decodes the bulkheads mapping. Bulkheads without lease_ttl get
// defaultTTL. Names are checked here; limits are checked by validate.
func (d *decoder) bulkheads(raw any, defaultTTL time.Duration) map[string]Bulkhead {
	m, _ := d.mapping("bulkheads", raw)
	out := make(map[string]Bulkhead, len(m))
	for _, name := range sortedKeys(m) {
		path := "bulkheads." + name
		switch {
		case ValidName(name):
		case ValidName(strings.ToLower(name)):
			d.ps.add(path, "bulkhead names are case-sensitive and must be lowercase, matching "+NamePattern, show(name))
		default:
			d.ps.add(path, "bulkhead name must match "+NamePattern, show(name))
		}
		out[name] = d.bulkhead(path, m[name], defaultTTL)
	}
	return out
}

// bulkhead decodes one bulkhead and checks its settings.
func (d *decoder) bulkhead(path string, raw any, defaultTTL time.Duration) Bulkhead {
	b := Bulkhead{LeaseTTL: defaultTTL}
	fields, ok := d.mapping(path, raw)
	if !ok {
		return b
	}
	s := &b.Settings
	if fields["max_concurrent"] == nil {
		d.ps.add(path+".max_concurrent", "is required", "")
	}
	for _, k := range sortedKeys(fields) {
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
		default:
			d.ps.add(key, unknownField(k, bulkheadFields), "")
		}
	}
	d.settings(path, b)
	return b
}

// reserve decodes a bulkhead's reserve mapping.
func (d *decoder) reserve(path string, raw any) (critical, normal float64) {
	m, _ := d.mapping(path, raw)
	for _, k := range sortedKeys(m) {
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

// positive records a problem at key unless t > 0.
func (d *decoder) positive(key string, v any, t time.Duration) {
	if t <= 0 && !d.ps.bad[key] {
		d.ps.add(key, "must be positive", d.got(key, v))
	}
}
