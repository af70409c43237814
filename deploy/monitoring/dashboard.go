package monitoring

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// ErrDashboard is wrapped by DashboardQueries' errors.
var ErrDashboard = errors.New("bad dashboard")

// Query is one PromQL query of a dashboard.
type Query struct {
	// Source says where the query is, e.g. `panel 3 "Queue depth" target B`.
	Source string
	// Panel and RefID are the panel's title and the target's refId ("" for
	// a variable's query).
	Panel, RefID string
	// Expr is the PromQL expression with the variables substituted.
	Expr string
}

// DefaultVars are substitutions for the Grafana variables Bulkhead's
// dashboard uses: every dependency, and rate windows that suit a
// Prometheus scraping every second or so.
func DefaultVars() map[string]string {
	return map[string]string{
		"dependency":      ".*",
		"kind":            ".*",
		"datasource":      "prometheus",
		"__rate_interval": "30s",
		"__interval":      "5s",
		"__range":         "5m",
	}
}

// dashboard is the part of Grafana's dashboard model that holds queries.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int      `json:"id"`
	Type    string   `json:"type"`
	Title   string   `json:"title"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"` // collapsed rows hold their panels
}

type target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
	Hide  bool   `json:"hide"`
}

type variable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

var (
	// $var, ${var}, ${var:format} and [[var]].
	varRE = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[A-Za-z0-9_]+)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)\]\]`)
	// label_values(selector, label) of a query variable.
	labelValuesRE = regexp.MustCompile(`^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)
)

// DashboardQueries returns every query of the dashboard JSON in panel order,
// then the query variables (label_values(sel, label) becomes
// "count by (label) (sel)"), with vars substituted. A variable without a
// substitution, a panel of a data type with no target, or a target without
// an expression is an error.
func DashboardQueries(data []byte, vars map[string]string) ([]Query, error) {
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDashboard, err)
	}
	var qs []Query
	var errs []error
	add := func(source, panel, refID, expr string) {
		e, err := Substitute(expr, vars)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", source, err))
			return
		}
		qs = append(qs, Query{Source: source, Panel: panel, RefID: refID, Expr: e})
	}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			src := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if len(p.Targets) == 0 && p.Type != "text" {
				errs = append(errs, fmt.Errorf("%s: no targets", src))
			}
			for _, t := range p.Targets {
				if t.Hide {
					continue
				}
				if strings.TrimSpace(t.Expr) == "" {
					errs = append(errs, fmt.Errorf("%s target %s: empty expr", src, t.RefID))
					continue
				}
				add(fmt.Sprintf("%s target %s", src, t.RefID), p.Title, t.RefID, t.Expr)
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := variableQuery(v.Query)
		m := labelValuesRE.FindStringSubmatch(q)
		if m == nil {
			errs = append(errs, fmt.Errorf("variable %s: want label_values(selector, label), got %q", v.Name, q))
			continue
		}
		add(fmt.Sprintf("variable %s", v.Name), "", "", fmt.Sprintf("count by (%s) (%s)", m[2], m[1]))
	}
	if len(qs) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no queries"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDashboard, err)
	}
	return qs, nil
}

// variableQuery returns a query variable's query: Grafana stores it as a
// string or as {"query": "..."}.
func variableQuery(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.Query
}

// Substitute replaces Grafana variable references in expr by their values
// in vars. References to variables missing from vars are an error listing
// them.
func Substitute(expr string, vars map[string]string) (string, error) {
	missing := map[string]bool{}
	out := varRE.ReplaceAllStringFunc(expr, func(ref string) string {
		m := varRE.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		v, ok := vars[name]
		if !ok {
			missing[name] = true
			return ref
		}
		return v
	})
	if len(missing) > 0 {
		names := make([]string, 0, len(missing))
		for n := range missing {
			names = append(names, n)
		}
		sort.Strings(names)
		return "", fmt.Errorf("no value for variable(s) %s in %q", strings.Join(names, ", "), expr)
	}
	return out, nil
}
