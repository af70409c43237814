package monitoring

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrRules is wrapped by Rules' errors.
var ErrRules = errors.New("bad rule file")

// Rule is one alerting or recording rule of a Prometheus rule file.
type Rule struct {
	Group       string            `yaml:"-"`
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// Name is the alert's or the recording rule's name.
func (r Rule) Name() string {
	if r.Alert != "" {
		return r.Alert
	}
	return r.Record
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []Rule `yaml:"rules"`
	} `yaml:"groups"`
}

// Rules returns the rules of a Prometheus rule file in file order. Unknown
// fields are errors.
func Rules(data []byte) ([]Rule, error) {
	var f ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRules, err)
	}
	var rs []Rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			r.Group = g.Name
			r.Expr = strings.TrimSpace(r.Expr)
			if r.Expr == "" || r.Name() == "" {
				return nil, fmt.Errorf("%w: group %s: a rule without a name or an expr", ErrRules, g.Name)
			}
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("%w: no rules", ErrRules)
	}
	return rs, nil
}

// DataQuery returns expr rewritten to return a sample for every series it
// compares, whatever the thresholds: every comparison operator gets the bool
// modifier (so "x > 0.01" yields 0 or 1 instead of filtering), and
// absent(x) / absent_over_time(x) become (x) (which has data exactly when
// the absent form has none). String literals and label matchers are left
// alone.
func DataQuery(expr string) string {
	var b strings.Builder
	depth := 0 // inside {...}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch c {
		case '"', '\'', '`':
			j := skipString(expr, i)
			b.WriteString(expr[i:j])
			i = j
			continue
		case '{':
			depth++
		case '}':
			depth--
		case '#':
			j := strings.IndexByte(expr[i:], '\n')
			if j < 0 {
				return b.String()
			}
			i += j
			continue
		}
		if depth == 0 {
			if n := absentPrefix(expr[i:]); n > 0 {
				b.WriteByte('(')
				i += n
				continue
			}
			if op := comparison(expr[i:]); op != "" {
				b.WriteString(op)
				i += len(op)
				rest := strings.TrimLeft(expr[i:], " \t\n")
				if !strings.HasPrefix(rest, "bool") {
					b.WriteString(" bool")
				}
				continue
			}
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

var absentRE = regexp.MustCompile(`^absent(_over_time)?\s*\(`)

// absentPrefix returns the length of a leading "absent(" or
// "absent_over_time(" that starts an identifier, or 0.
func absentPrefix(s string) int {
	return len(absentRE.FindString(s))
}

// comparison returns the comparison operator at the start of s, or "".
func comparison(s string) string {
	for _, op := range []string{"==", "!=", ">=", "<=", ">", "<"} {
		if strings.HasPrefix(s, op) {
			return op
		}
	}
	return ""
}

// skipString returns the index just past the string literal starting at i.
func skipString(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			if q != '`' {
				j++
			}
		case q:
			return j + 1
		}
	}
	return len(s)
}

var (
	// A recorded series' name (level:metric:operations) is one name,
	// e.g. dependency:bulkhead_running_calls.
	metricRE = regexp.MustCompile(`\b(?:[a-z_]+:)?(?:bulkhead|envoy)_[a-z0-9_]+(?::[a-z0-9_]+)?`)
	// Label lists: by (...), without (...), on (...), ignoring (...),
	// group_left (...), group_right (...).
	labelListRE = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
)

// MetricNames returns the sorted, distinct bulkhead_* and envoy_* metric
// names in expr, recorded ones (dependency:bulkhead_running_calls) whole:
// label values, label matchers ({...}) and label lists
// (by (...) and the like) are left out, so that a label such as
// envoy_cluster_name is not taken for a metric.
func MetricNames(expr string) []string {
	var b strings.Builder
	depth := 0 // inside {...}
	for i := 0; i < len(expr); {
		switch c := expr[i]; {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(expr, i)
			b.WriteByte(' ')
			continue
		case c == '{':
			depth++
		case c == '}':
			depth--
		case depth == 0:
			b.WriteByte(c)
			i++
			continue
		}
		b.WriteByte(' ')
		i++
	}
	seen := map[string]bool{}
	for _, m := range metricRE.FindAllString(labelListRE.ReplaceAllString(b.String(), " "), -1) {
		seen[m] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
