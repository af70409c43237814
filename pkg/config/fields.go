package config

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// decoder turns raw values (from YAML, env, flags or defaults) into typed
// fields, recording a Problem for each value of the wrong type.
type decoder struct {
	ps problems
	// origin maps a key to where its effective value came from when that
	// was an env variable or a flag; absent means the file or a default.
	origin map[string]string
	// checkFiles makes validate read the files the configuration names
	// (admin token and TLS files): Load does, Parse does not.
	checkFiles bool
	// explicit records the keys set in the file, an env variable or a
	// flag (not by their default).
	explicit map[string]bool
	// localShare: ledger.on_unavailable said local_share
	// (resolveLocalShare).
	localShare bool
	// ws are the warnings: settings accepted that say something other
	// than they are read as (Config.Warnings).
	ws []Problem
}

// got formats v for a problem about key, naming its origin if not the file.
func (d *decoder) got(key string, v any) string {
	if o := d.origin[key]; o != "" {
		return show(v) + " from " + o
	}
	return show(v)
}

// check records a problem "key: reason" unless ok.
func (d *decoder) check(key string, v any, ok bool, reason string) {
	if !ok {
		d.ps.add(key, reason, d.got(key, v))
	}
}

func (d *decoder) strOK(key string, v any) (string, bool) {
	s, ok := v.(string)
	d.check(key, v, ok, "must be a string")
	return s, ok
}

func (d *decoder) str(key string, v any) string {
	s, _ := d.strOK(key, v)
	return s
}

// integer accepts YAML integers and decimal strings (as env and flags give).
func (d *decoder) integer(key string, v any) int {
	var n int64
	ok := true
	switch v := v.(type) {
	case int:
		n = int64(v)
	case int64:
		n = v
	case uint64:
		n = int64(min(v, math.MaxInt64))
	case string:
		var err error
		n, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		ok = err == nil || errors.Is(err, strconv.ErrRange)
	default:
		ok = false
	}
	if ok && (n > math.MaxInt32 || n < math.MinInt32) {
		d.ps.add(key, "is out of range", d.got(key, v))
		return 0
	}
	d.check(key, v, ok, "must be an integer")
	if !ok {
		return 0
	}
	return int(n)
}

// float accepts YAML numbers and decimal strings.
func (d *decoder) float(key string, v any) float64 {
	switch v := v.(type) {
	case float64:
		return v
	case int:
		return float64(v)
	case int64:
		return float64(v)
	case uint64:
		return float64(v)
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			return f
		}
	}
	d.check(key, v, false, "must be a number")
	return 0
}

// duration accepts Go duration strings ("500ms") and a plain 0. A bare
// non-zero number is refused: its unit would be a guess.
func (d *decoder) duration(key string, v any) time.Duration {
	switch v := v.(type) {
	case time.Duration:
		return v
	case int:
		if v == 0 {
			return 0
		}
	case string:
		if t, err := time.ParseDuration(strings.TrimSpace(v)); err == nil {
			return t
		}
	}
	d.check(key, v, false, `must be a duration with a unit, like "500ms" or "1m30s"`)
	return 0
}

// prefixes accepts a YAML list of CIDR prefixes, or one string of them
// separated by commas (as an environment variable gives). Each must be a
// canonical prefix ("10.0.0.0/8"; one address is "127.0.0.1/32"). An empty
// list is nil.
func (d *decoder) prefixes(key string, v any) []netip.Prefix {
	var items []any
	switch v := v.(type) {
	case nil:
		return nil
	case []any:
		items = v
	case []string:
		for _, s := range v {
			items = append(items, s)
		}
	case string:
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
	default:
		d.check(key, v, false, `must be a list of CIDR prefixes, like ["127.0.0.0/8", "10.0.0.0/8"]`)
		return nil
	}
	var out []netip.Prefix
	for i, item := range items {
		ik := fmt.Sprintf("%s[%d]", key, i)
		s, ok := item.(string)
		if !ok {
			d.ps.add(ik, "must be a CIDR prefix string, like \"10.0.0.0/8\"", d.got(key, item))
			continue
		}
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		switch {
		case err != nil:
			reason := `must be a CIDR prefix, like "10.0.0.0/8"`
			if a, aerr := netip.ParseAddr(strings.TrimSpace(s)); aerr == nil {
				reason += fmt.Sprintf(" (one address: %q)", netip.PrefixFrom(a, a.BitLen()).String())
			}
			d.ps.add(ik, reason, d.got(key, item))
		case p != p.Masked():
			d.ps.add(ik, fmt.Sprintf("has bits set beyond its prefix length (did you mean %q?)", p.Masked().String()), d.got(key, item))
		default:
			out = append(out, p)
		}
	}
	return out
}

// boolean accepts YAML booleans and "true"/"false" (as env and flags give).
func (d *decoder) boolean(key string, v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		if b, err := strconv.ParseBool(strings.TrimSpace(v)); err == nil {
			return b
		}
	}
	d.check(key, v, false, "must be true or false")
	return false
}

// strs accepts a YAML list of strings, or one string of them separated by
// commas (as an environment variable gives). An empty list is nil.
func (d *decoder) strs(key string, v any) []string {
	var out []string
	switch v := v.(type) {
	case nil:
	case []any:
		for i, item := range v {
			s, ok := item.(string)
			if !ok {
				d.ps.add(fmt.Sprintf("%s[%d]", key, i), "must be a string", d.got(key, item))
				continue
			}
			out = append(out, strings.TrimSpace(s))
		}
	case []string:
		out = append(out, v...)
	case string:
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	default:
		d.check(key, v, false, "must be a list of strings")
	}
	return out
}

// unknownField returns the problem reason for an unknown field among known.
func unknownField(name string, known []string) string {
	for _, k := range known {
		if strings.EqualFold(name, k) {
			return fmt.Sprintf("unknown field (field names are lowercase: %s)", k)
		}
	}
	return "unknown field (known: " + strings.Join(known, ", ") + ")"
}
