package config

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// readme returns the repository's README.md.
func readme(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

var backquoted = regexp.MustCompile("`([^`]*)`")

// expandKeys maps "section.*" to the scalar keys under section, and a key to
// itself; ok is false for a name that is neither.
func expandKeys(name string) (keys []string, ok bool) {
	prefix, wild := strings.CutSuffix(name, ".*")
	for _, s := range scalars {
		if s.key == name || wild && strings.HasPrefix(s.key, prefix+".") {
			keys = append(keys, s.key)
		}
	}
	return keys, len(keys) > 0
}

// TestREADMERestartOnly: the README's list of settings that need a restart
// is RestartOnly's.
func TestREADMERestartOnly(t *testing.T) {
	var line string
	for l := range strings.Lines(readme(t)) {
		if strings.Contains(l, "need a restart") {
			line = l
			break
		}
	}
	if line == "" {
		t.Fatal(`README.md has no line saying which settings "need a restart"`)
	}
	var got []string
	for _, m := range backquoted.FindAllStringSubmatch(line, -1) {
		if keys, ok := expandKeys(m[1]); ok {
			got = append(got, keys...)
		}
	}
	var want []string
	for _, s := range scalars {
		if s.restart {
			want = append(want, s.key)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("README.md says these need a restart:\n%v\nRestartOnly knows:\n%v", got, want)
	}
}

// TestREADMEDefaults: each default in the README's settings table is the
// one Load applies.
func TestREADMEDefaults(t *testing.T) {
	defs := map[string]any{}
	for _, s := range scalars {
		defs[s.key] = s.def
	}
	rows := 0
	for l := range strings.Lines(readme(t)) {
		cells := strings.Split(l, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		var keys, vals []string
		for _, m := range backquoted.FindAllStringSubmatch(cells[1], -1) {
			keys = append(keys, m[1])
		}
		for _, m := range backquoted.FindAllStringSubmatch(cells[2], -1) {
			vals = append(vals, m[1])
		}
		if _, known := defs[keys[0]]; !known || len(vals) == 0 {
			continue // another table, or no default to compare
		}
		if len(keys) != len(vals) {
			t.Errorf("README.md row %q: %d settings, %d defaults", strings.TrimSpace(l), len(keys), len(vals))
			continue
		}
		for i, k := range keys {
			rows++
			if !sameDefault(vals[i], defs[k]) {
				t.Errorf("README.md: %s defaults to %s, Load to %v", k, vals[i], defs[k])
			}
		}
	}
	if rows < 15 {
		t.Errorf("found %d defaults in README.md's settings table, want at least 15", rows)
	}
}

// sameDefault reports whether the README's doc (as written in backquotes)
// documents def.
func sameDefault(doc string, def any) bool {
	switch def := def.(type) {
	case []any:
		return doc == "[]" && len(def) == 0
	case string:
		if doc == `""` {
			return def == ""
		}
		dd, err1 := time.ParseDuration(doc)
		dv, err2 := time.ParseDuration(def)
		if err1 == nil && err2 == nil {
			return dd == dv
		}
		return doc == def
	default:
		return doc == fmt.Sprint(def)
	}
}
