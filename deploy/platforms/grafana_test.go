package platforms

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// dashboardFile is the dashboard the chart ships and docker-compose mounts.
const dashboardFile = "charts/bulkhead/dashboards/bulkhead.json"

// The dashboard decodes with Grafana's own schema types
// (grafana-foundation-sdk): no unknown field, no required field missing, no
// field of the wrong type, in the dashboard, its rows, panels, panel options
// and field config, targets and variables.
func TestDashboardMatchesGrafanaSchema(t *testing.T) {
	problems := dashboardProblems(readRepoFile(t, dashboardFile))
	if len(problems) > 0 {
		t.Fatalf("%s does not decode strictly with grafana-foundation-sdk %s (%d problems):\n  %s",
			dashboardFile, moduleVersion(t, "deploy/platforms/go.mod", "github.com/grafana/grafana-foundation-sdk/go"),
			len(problems), strings.Join(problems, "\n  "))
	}
}

// The check fails on each kind of mistake, and names the panel.
func TestDashboardCheckIsStrict(t *testing.T) {
	raw := readRepoFile(t, dashboardFile)
	for _, tc := range []struct {
		name   string
		edit   func(d map[string]any)
		expect string // in one of the problems
	}{
		{"unknown dashboard field", func(d map[string]any) { d["titel"] = "x" }, "unexpected field 'titel'"},
		{"missing schemaVersion", func(d map[string]any) { delete(d, "schemaVersion") }, "schemaVersion: required field is missing"},
		{"title of the wrong type", func(d map[string]any) { d["title"] = 3 }, "title: json: cannot unmarshal number"},
		{"unknown panel field", func(d map[string]any) { panelByID(d, 3)["titel"] = "x" },
			`panel 3 "Active permits, running requests and limit": unexpected field 'titel'`},
		{"panel without a type", func(d map[string]any) { delete(panelByID(d, 3), "type") }, `panel 3 "Active permits, running requests and limit"`},
		{"unknown option", func(d map[string]any) { obj(panelByID(d, 3), "options")["legnd"] = map[string]any{} },
			`panel 3 "Active permits, running requests and limit": options: unexpected field 'legnd'`},
		{"option of the wrong type", func(d map[string]any) { obj(obj(panelByID(d, 3), "options"), "legend")["showLegend"] = "yes" },
			`panel 3 "Active permits, running requests and limit": options.legend.showLegend`},
		{"unknown custom field config", func(d map[string]any) {
			obj(obj(obj(panelByID(d, 3), "fieldConfig"), "defaults"), "custom")["lineWidht"] = 1
		}, `panel 3 "Active permits, running requests and limit": fieldConfig.defaults.custom: unexpected field 'lineWidht'`},
		{"unknown field config default", func(d map[string]any) { obj(obj(panelByID(d, 3), "fieldConfig"), "defaults")["unti"] = "s" },
			`panel 3 "Active permits, running requests and limit": fieldConfig.defaults: unexpected field 'unti'`},
		{"min of the wrong type", func(d map[string]any) { obj(obj(panelByID(d, 3), "fieldConfig"), "defaults")["min"] = "0" },
			`panel 3 "Active permits, running requests and limit": fieldConfig.defaults.min`},
		{"unknown target field", func(d map[string]any) { target(panelByID(d, 3), 0)["expression"] = "up" },
			`panel 3 "Active permits, running requests and limit": targets[0]: unexpected field 'expression'`},
		{"expr of the wrong type", func(d map[string]any) { target(panelByID(d, 3), 0)["expr"] = 1 },
			`panel 3 "Active permits, running requests and limit": targets[0].expr`},
		{"target of an unknown data source", func(d map[string]any) {
			obj(target(panelByID(d, 3), 0), "datasource")["type"] = "prometheous"
			delete(panelByID(d, 3), "datasource")
		}, `panel 3 "Active permits, running requests and limit": targets[0]: not a Prometheus query`},
		{"unknown grid field", func(d map[string]any) { obj(panelByID(d, 3), "gridPos")["width"] = 3 },
			`panel 3 "Active permits, running requests and limit": gridPos: unexpected field 'width'`},
		{"unknown row field", func(d map[string]any) { panelByID(d, 1)["colapsed"] = true },
			`row 1 "Capacity": unexpected field 'colapsed'`},
		{"panel in a collapsed row", func(d map[string]any) {
			panels := d["panels"].([]any)
			row, panel := panels[0].(map[string]any), panels[2].(map[string]any)
			panel["titel"] = "x"
			row["collapsed"], row["panels"] = true, []any{panel}
			d["panels"] = append([]any{row}, panels[3:]...)
		}, `panel 3 "Active permits, running requests and limit" in row 1 "Capacity": unexpected field 'titel'`},
		{"required option missing", func(d map[string]any) { delete(obj(panelByID(d, 2), "options"), "showValue") },
			`panel 2 "Utilisation per bulkhead (running / limit)": options.showValue: required field is missing`},
		{"empty current value", func(d map[string]any) { variable(d, 0)["current"] = map[string]any{} },
			`variable "datasource": current.text: required field is missing`},
		{"unknown variable field", func(d map[string]any) { variable(d, 1)["refrsh"] = 2 },
			`variable "kind": unexpected field 'refrsh'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d map[string]any
			if err := json.Unmarshal(raw, &d); err != nil {
				t.Fatal(err)
			}
			tc.edit(d)
			edited, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			problems := dashboardProblems(edited)
			for _, p := range problems {
				if strings.Contains(p, tc.expect) {
					return
				}
			}
			t.Errorf("no problem contains %q; got %d:\n  %s", tc.expect, len(problems), strings.Join(problems, "\n  "))
		})
	}
}

// dashboardProblems decodes a dashboard's JSON model strictly with
// grafana-foundation-sdk's types and returns one line per problem, naming
// the panel (id and title) or variable it is in.
//
// The SDK's strict decoding (UnmarshalJSONStrict) finds unknown fields,
// missing required fields and wrong types, but three things around it do
// not hold, and are made up for here:
//   - Its decoders return an empty cog.BuildErrors, a non-nil error, when
//     all is well; where the generated code returns early on it (a panel
//     in PanelOrRowPanel, a query, a panel's options) the decoded value is
//     dropped, so the dashboard it builds has no panels, targets or
//     options. Empty error lists count as success here (sdkError), and
//     the typed dashboard is built again by the SDK's lenient decoder
//     (json.Unmarshal), complete, for Validate and the checks below.
//   - It decodes a panel's fieldConfig leniently (only
//     fieldConfig.defaults.custom strictly): each fieldConfig is decoded
//     again with the SDK's strict FieldConfigSource.
//   - It keeps a target whose data source type it does not know as an
//     unchecked bag of fields: every target must have become a Prometheus
//     query (the only data source the dashboard uses).
func dashboardProblems(raw []byte) []string {
	plugins.RegisterDefaultPlugins() // the panel and query schemas: without them options and targets go unchecked
	var lay layout
	if err := json.Unmarshal(raw, &lay); err != nil {
		return []string{"not JSON: " + err.Error()}
	}
	// The classic JSON model (the file's schemaVersion 39, what Grafana's
	// dashboard sidecar and provisioning load) is dashboard.Dashboard; the SDK
	// marks it deprecated in favour of dashboardv2, a different model.
	var strict dashboard.Dashboard //nolint:staticcheck // see above
	problems := lay.describe(sdkError(strict.UnmarshalJSONStrict(raw)))
	for i, p := range lay.Panels {
		where := fmt.Sprintf("panels[%d]", i)
		problems = append(problems, lay.describe(fieldConfigError(where, p.FieldConfig))...)
		for j, nested := range p.Panels {
			problems = append(problems, lay.describe(fieldConfigError(fmt.Sprintf("%s.panels[%d]", where, j), nested.FieldConfig))...)
		}
	}
	var d dashboard.Dashboard //nolint:staticcheck // the classic model, as above
	if err := json.Unmarshal(raw, &d); err != nil {
		return append(problems, "the SDK's own (lenient) decoder: "+err.Error())
	}
	problems = append(problems, lay.describe(d.Validate())...)
	for i, p := range d.Panels {
		switch {
		case p.Panel != nil:
			problems = append(problems, lay.describe(targetError(fmt.Sprintf("panels[%d]", i), p.Panel.Targets))...)
		case p.RowPanel != nil:
			for j, nested := range p.RowPanel.Panels {
				problems = append(problems, lay.describe(targetError(fmt.Sprintf("panels[%d].panels[%d]", i, j), nested.Targets))...)
			}
		}
	}
	return problems
}

// sdkError is nil for the SDK's empty error list (see dashboardProblems).
func sdkError(err error) error {
	var errs cog.BuildErrors
	if errors.As(err, &errs) && len(errs) == 0 {
		return nil
	}
	return err
}

// fieldConfigError decodes one panel's fieldConfig strictly.
func fieldConfigError(path string, raw json.RawMessage) error {
	if raw == nil {
		return nil
	}
	var fc dashboard.FieldConfigSource
	if err := sdkError(fc.UnmarshalJSONStrict(raw)); err != nil {
		return cog.MakeBuildErrors(path+".fieldConfig", err)
	}
	return nil
}

// targetError reports the targets the SDK did not decode as Prometheus
// queries.
func targetError(path string, targets []variants.Dataquery) error {
	var errs cog.BuildErrors
	for i, q := range targets {
		if _, ok := q.(*prometheus.Dataquery); !ok {
			errs = append(errs, &cog.BuildError{
				Path:    fmt.Sprintf("%s.targets[%d]", path, i),
				Message: fmt.Sprintf("not a Prometheus query (decoded as %T: its datasource type has no schema in the SDK, so nothing in it was checked)", q),
			})
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// layout is the little of the dashboard needed to name where a problem is.
type layout struct {
	Panels []struct {
		layoutPanel
		Panels []layoutPanel `json:"panels"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
		} `json:"list"`
	} `json:"templating"`
}

type layoutPanel struct {
	ID          int             `json:"id"`
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	FieldConfig json.RawMessage `json:"fieldConfig"`
}

func (p layoutPanel) String() string {
	kind := "panel"
	if p.Type == "row" {
		kind = "row"
	}
	return fmt.Sprintf("%s %d %q", kind, p.ID, p.Title)
}

var (
	panelPathRE    = regexp.MustCompile(`^panels\[(\d+)\](?:\.panels\[(\d+)\])?\.?`)
	variablePathRE = regexp.MustCompile(`^templating\.list\[(\d+)\]\.?`)
)

// describe turns the SDK's errors (paths like "panels[3].options.legend")
// into lines that name the panel or variable.
func (l layout) describe(err error) []string {
	if err == nil {
		return nil
	}
	var errs cog.BuildErrors
	if !errors.As(err, &errs) {
		return []string{err.Error()}
	}
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, l.name(jsonPath(e.Path))+": "+e.Message)
	}
	return out
}

// jsonPath drops the SDK's type names from an error path
// ("targets[0].Dataquery" is "targets[0]"): JSON field names start in
// lower case, Go type names in upper case.
func jsonPath(path string) string {
	parts := strings.Split(path, ".")
	kept := parts[:0]
	for _, p := range parts {
		if p != "" && p[0] >= 'A' && p[0] <= 'Z' {
			continue
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, ".")
}

// name rewrites the start of an SDK error path.
func (l layout) name(path string) string {
	if m := panelPathRE.FindStringSubmatch(path); m != nil {
		i, _ := strconv.Atoi(m[1])
		rest := strings.TrimSuffix(path[len(m[0]):], ".")
		where := "panels[" + m[1] + "]"
		if i < len(l.Panels) {
			p := l.Panels[i].layoutPanel
			where = p.String()
			if m[2] != "" {
				j, _ := strconv.Atoi(m[2])
				if j < len(l.Panels[i].Panels) {
					where = fmt.Sprintf("%s in %s", l.Panels[i].Panels[j], p)
				}
			}
		}
		if rest == "" {
			return where
		}
		return where + ": " + rest
	}
	if m := variablePathRE.FindStringSubmatch(path); m != nil {
		i, _ := strconv.Atoi(m[1])
		rest := strings.TrimSuffix(path[len(m[0]):], ".")
		where := "templating.list[" + m[1] + "]"
		if i < len(l.Templating.List) {
			where = fmt.Sprintf("variable %q", l.Templating.List[i].Name)
		}
		if rest == "" {
			return where
		}
		return where + ": " + rest
	}
	return path
}

// Helpers for the edits of TestDashboardCheckIsStrict.

func panelByID(d map[string]any, id int) map[string]any {
	for _, p := range d["panels"].([]any) {
		if m := p.(map[string]any); m["id"] == float64(id) {
			return m
		}
	}
	panic(fmt.Sprintf("no panel %d", id))
}

func obj(m map[string]any, key string) map[string]any { return m[key].(map[string]any) }

func target(panel map[string]any, i int) map[string]any {
	return panel["targets"].([]any)[i].(map[string]any)
}

func variable(d map[string]any, i int) map[string]any {
	return obj(d, "templating")["list"].([]any)[i].(map[string]any)
}
