package monitoring

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDataQuery(t *testing.T) {
	tests := []struct{ in, want string }{
		{`x > 0.01`, `x > bool 0.01`},
		{`x > bool 0.01`, `x > bool 0.01`},
		{`up{job="bulkhead"} == 0`, `up{job="bulkhead"} == bool 0`},
		{`a{x!="y",z=~"a|b"} >= 1`, `a{x!="y",z=~"a|b"} >= bool 1`},
		{`(a > 0.9) and (b < 3)`, `(a > bool 0.9) and (b < bool 3)`},
		{`a != on(x) b`, `a != bool on(x) b`},
		{`absent(up{job="bulkhead"})`, `(up{job="bulkhead"})`},
		{`absent_over_time(up[5m])`, `(up[5m])`},
		{`sum(rate(x{l=">"}[5m]))`, `sum(rate(x{l=">"}[5m]))`},
		{"x # a > comment\n< 2", "x \n< bool 2"},
		{`label_replace(x, "a", "$1", "b", "(.*)>")`, `label_replace(x, "a", "$1", "b", "(.*)>")`},
	}
	for _, tt := range tests {
		if got := DataQuery(tt.in); got != tt.want {
			t.Errorf("DataQuery(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`sum(rate(bulkhead_rejected_total{job="bulkhead_x"}[5m])) / bulkhead_limit + up + bulkhead_limit`,
			[]string{"bulkhead_limit", "bulkhead_rejected_total"}},
		{`sum by (envoy_cluster_name) (rate(envoy_cluster_upstream_rq_timeout{envoy_cluster_name=~".*bulkhead.*"}[1m]))`,
			[]string{"envoy_cluster_upstream_rq_timeout"}},
		{`sum by (instance) (envoy_http_ext_authz_error) / on (envoy_http_conn_manager_prefix) envoy_http_ext_authz_ok`,
			[]string{"envoy_http_ext_authz_error", "envoy_http_ext_authz_ok"}},
		{`up{job="bulkhead"}`, []string{}},
		{`avg_over_time(dependency:bulkhead_running_calls{job="bulkhead"}[10m]) / bulkhead_limit`,
			[]string{"bulkhead_limit", "dependency:bulkhead_running_calls"}},
		{`quantile_over_time(0.99, (max by (dependency) (dependency:bulkhead_suggested_max_concurrent:1h))[1h:])`,
			[]string{"dependency:bulkhead_suggested_max_concurrent:1h"}},
	}
	for _, tt := range tests {
		if got := MetricNames(tt.expr); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("MetricNames(%s) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}

func TestSubstitute(t *testing.T) {
	vars := map[string]string{"dependency": ".*", "__rate_interval": "1m"}
	tests := []struct {
		in, want, err string
	}{
		{`rate(x{d=~"$dependency"}[$__rate_interval])`, `rate(x{d=~".*"}[1m])`, ""},
		{`x{d=~"${dependency}"}`, `x{d=~".*"}`, ""},
		{`x{d=~"${dependency:regex}"}`, `x{d=~".*"}`, ""},
		{`x{d=~"[[dependency]]"}`, `x{d=~".*"}`, ""},
		{`x[$__range] + $nope`, "", "__range, nope"},
	}
	for _, tt := range tests {
		got, err := Substitute(tt.in, vars)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("Substitute(%q) error %v, want one naming %s", tt.in, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("Substitute(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestDashboardQueries(t *testing.T) {
	const dash = `{
	  "panels": [
	    {"id": 1, "type": "row", "title": "r", "panels": [
	      {"id": 2, "type": "timeseries", "title": "in row", "targets": [{"refId": "A", "expr": "a{d=~\"$dependency\"}"}]}
	    ]},
	    {"id": 3, "type": "timeseries", "title": "t", "targets": [
	      {"refId": "A", "expr": "rate(b[$__rate_interval])"},
	      {"refId": "B", "expr": "hidden", "hide": true}
	    ]}
	  ],
	  "templating": {"list": [
	    {"name": "datasource", "type": "datasource", "query": "prometheus"},
	    {"name": "dependency", "type": "query", "query": {"query": "label_values(bulkhead_limit{job=\"bulkhead\"}, dependency)"}}
	  ]}
	}`
	got, err := DashboardQueries([]byte(dash), DefaultVars())
	if err != nil {
		t.Fatal(err)
	}
	want := []Query{
		{`panel 2 "in row" target A`, "in row", "A", `a{d=~".*"}`},
		{`panel 3 "t" target A`, "t", "A", `rate(b[30s])`},
		{`variable dependency`, "", "", `count by (dependency) (bulkhead_limit{job="bulkhead"})`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DashboardQueries =\n%q\nwant\n%q", got, want)
	}
}

func TestDashboardQueriesErrors(t *testing.T) {
	tests := map[string]string{
		"not json":     `{`,
		"empty expr":   `{"panels": [{"id": 1, "type": "timeseries", "targets": [{"refId": "A", "expr": " "}]}]}`,
		"no targets":   `{"panels": [{"id": 1, "type": "timeseries"}]}`,
		"unknown var":  `{"panels": [{"id": 1, "type": "stat", "targets": [{"refId": "A", "expr": "x[$window]"}]}]}`,
		"bad variable": `{"panels": [], "templating": {"list": [{"name": "v", "type": "query", "query": "up"}]}}`,
		"no queries":   `{"panels": []}`,
	}
	for name, dash := range tests {
		if _, err := DashboardQueries([]byte(dash), DefaultVars()); !errors.Is(err, ErrDashboard) {
			t.Errorf("%s: error %v, want ErrDashboard", name, err)
		}
	}
}

func TestRules(t *testing.T) {
	const file = `
groups:
- name: g
  rules:
  - alert: A
    expr: |
      x > 1
    for: 1m
    labels: {severity: page}
  - record: r:x
    expr: sum(x)
`
	rs, err := Rules([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Name() != "A" || rs[0].Expr != "x > 1" || rs[0].Group != "g" || rs[1].Name() != "r:x" {
		t.Errorf("Rules = %+v", rs)
	}
	for name, bad := range map[string]string{
		"unknown field": "groups: [{name: g, rules: [{alert: A, expr: x, fro: 1m}]}]",
		"no expr":       "groups: [{name: g, rules: [{alert: A}]}]",
		"no rules":      "groups: []",
	} {
		if _, err := Rules([]byte(bad)); !errors.Is(err, ErrRules) {
			t.Errorf("%s: error %v, want ErrRules", name, err)
		}
	}
}
