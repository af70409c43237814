package deploy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// fullWidth is the width of a panel across the whole of Grafana's 24-column
// grid.
const fullWidth = 24

// Every time series panel keeps a legend the chart leaves room for.
func TestDashboardLegendsFit(t *testing.T) {
	if problems := legendProblems(t, readRepoFile(t, dashboardPath)); len(problems) > 0 {
		t.Errorf("%s:\n  %s", dashboardPath, strings.Join(problems, "\n  "))
	}
}

// The check finds a right-side legend on a narrow panel and a hidden one.
func TestDashboardLegendCheck(t *testing.T) {
	for _, tc := range []struct {
		name, legend string
		width        int
		expect       string // in one of the problems; "" for none
	}{
		{"right table, full width", `{"displayMode": "table", "placement": "right", "calcs": ["max"], "showLegend": true}`, 24, ""},
		{"bottom list, narrow", `{"displayMode": "list", "placement": "bottom", "calcs": [], "showLegend": true}`, 8, ""},
		{"right table, half width", `{"displayMode": "table", "placement": "right", "calcs": ["max"], "showLegend": true}`, 12, "right-side legend on a 12-wide panel"},
		{"right list, narrow", `{"displayMode": "list", "placement": "right", "showLegend": true}`, 8, "right-side legend on a 8-wide panel"},
		{"hidden", `{"displayMode": "list", "placement": "bottom", "showLegend": false}`, 8, "no legend"},
		{"none", `null`, 8, "no legend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := fmt.Sprintf(`{"panels": [{"id": 7, "type": "timeseries", "title": "x", "gridPos": {"w": %d}, "options": {"legend": %s}}]}`,
				tc.width, tc.legend)
			problems := legendProblems(t, []byte(raw))
			switch {
			case tc.expect == "" && len(problems) > 0:
				t.Errorf("problems: %q", problems)
			case tc.expect != "" && (len(problems) != 1 || !strings.Contains(problems[0], tc.expect)):
				t.Errorf("problems %q, want one containing %q", problems, tc.expect)
			}
		})
	}
}

// legendProblems lists the time series panels whose legend is hidden or
// placed at the right of a panel narrower than the grid. Beside the chart a
// legend takes its width from the chart's: Perses drops one that leaves the
// chart too narrow (an 8-wide panel lost its table of two value columns),
// Grafana gives it up to 60% of the panel (a 12-wide panel's time axis
// labels overlapped). At the bottom it takes the panel's width and a few
// rows of its height, scrolling past them.
func legendProblems(t *testing.T, raw []byte) []string {
	t.Helper()
	type panel struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		GridPos struct {
			W int `json:"w"`
		} `json:"gridPos"`
		Options struct {
			Legend *struct {
				Placement  string `json:"placement"`
				ShowLegend bool   `json:"showLegend"`
			} `json:"legend"`
		} `json:"options"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	var problems []string
	for _, p := range d.Panels {
		if len(p.Panels) > 0 {
			t.Fatalf("row %d %q is collapsed: its panels are not checked", p.ID, p.Title)
		}
		if p.Type != "timeseries" {
			continue
		}
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		switch l := p.Options.Legend; {
		case l == nil || !l.ShowLegend:
			problems = append(problems, where+": no legend")
		case l.Placement == "right" && p.GridPos.W < fullWidth:
			problems = append(problems, fmt.Sprintf("%s: right-side legend on a %d-wide panel (at the right only on a full-width panel, %d)",
				where, p.GridPos.W, fullWidth))
		}
	}
	return problems
}
