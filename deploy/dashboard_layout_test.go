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

// Every panel has an id of its own and a place of its own on the grid: a
// panel added between others moves the ones below it down.
func TestDashboardGrid(t *testing.T) {
	if problems := gridProblems(t, readRepoFile(t, dashboardPath)); len(problems) > 0 {
		t.Errorf("%s:\n  %s", dashboardPath, strings.Join(problems, "\n  "))
	}
}

// The check finds a repeated id, a panel past the grid's edge and two
// panels on one cell.
func TestDashboardGridCheck(t *testing.T) {
	for _, tc := range []struct {
		name, second string // the second panel; the first is id 1 at x 0, y 0, 12 by 8
		expect       string // in one of the problems; "" for none
	}{
		{"beside", `{"id": 2, "gridPos": {"x": 12, "y": 0, "w": 12, "h": 8}}`, ""},
		{"below", `{"id": 2, "gridPos": {"x": 0, "y": 8, "w": 24, "h": 1}}`, ""},
		{"same id", `{"id": 1, "gridPos": {"x": 12, "y": 0, "w": 12, "h": 8}}`, "id 1 also on panel"},
		{"past the edge", `{"id": 2, "gridPos": {"x": 16, "y": 0, "w": 12, "h": 8}}`, "past the grid's 24 columns"},
		{"no size", `{"id": 2, "gridPos": {"x": 12, "y": 0, "w": 0, "h": 8}}`, "no width or height"},
		{"overlap", `{"id": 2, "gridPos": {"x": 8, "y": 7, "w": 8, "h": 8}}`, "overlaps panel 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := fmt.Sprintf(`{"panels": [{"id": 1, "gridPos": {"x": 0, "y": 0, "w": 12, "h": 8}}, %s]}`, tc.second)
			problems := gridProblems(t, []byte(raw))
			switch {
			case tc.expect == "" && len(problems) > 0:
				t.Errorf("problems: %q", problems)
			case tc.expect != "" && (len(problems) != 1 || !strings.Contains(problems[0], tc.expect)):
				t.Errorf("problems %q, want one containing %q", problems, tc.expect)
			}
		})
	}
}

// gridProblems lists the panels (rows included) whose id another panel
// has, that reach past the grid's width, have no size, or share a cell
// with a panel before them. Grafana moves overlapping panels apart as it
// loads them, so the file's layout is not the one shown.
func gridProblems(t *testing.T, raw []byte) []string {
	t.Helper()
	type panel struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		GridPos struct {
			X, Y, W, H int
		} `json:"gridPos"`
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	var problems []string
	ids := map[int]string{}
	for i, p := range d.Panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if other, ok := ids[p.ID]; ok {
			problems = append(problems, fmt.Sprintf("%s: id %d also on panel %s", where, p.ID, other))
		}
		ids[p.ID] = fmt.Sprintf("%q", p.Title)
		g := p.GridPos
		switch {
		case g.W <= 0 || g.H <= 0:
			problems = append(problems, where+": no width or height")
			continue
		case g.X < 0 || g.Y < 0 || g.X+g.W > fullWidth:
			problems = append(problems, fmt.Sprintf("%s: x %d, width %d: past the grid's %d columns", where, g.X, g.W, fullWidth))
		}
		for _, q := range d.Panels[:i] {
			o := q.GridPos
			if g.X < o.X+o.W && o.X < g.X+g.W && g.Y < o.Y+o.H && o.Y < g.Y+g.H {
				problems = append(problems, fmt.Sprintf("%s overlaps panel %d %q", where, q.ID, q.Title))
			}
		}
	}
	return problems
}
